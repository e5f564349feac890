"""TorchServe's ``load_models`` / ``--models`` value: which archives to register at startup.

``""`` or ``standalone``: none. ``all``: every archive in the model store. Otherwise a comma-separated
list of ``url`` or ``name=url`` items (TorchServe's ``ModelServer.initModelStore``).
"""

import os
from dataclasses import dataclass
from pathlib import Path

# File kinds `all` picks up (TorchServe also takes every non-hidden folder).
_ARCHIVE_SUFFIXES = (".mar", ".model", ".tar.gz")


@dataclass(frozen=True)
class StartupModelSpec:
    url: str
    # The name to register under; None takes the manifest's (or the file's) name.
    model_name: str | None = None


@dataclass(frozen=True)
class LoadModels:
    """A parsed ``load_models`` value: ``every_archive`` or an explicit list."""

    every_archive: bool = False
    specs: tuple[StartupModelSpec, ...] = ()


def parse_load_models(value: str) -> LoadModels:
    text = value.strip()
    if not text or text.lower() == "standalone":
        return LoadModels()
    if text.lower() == "all":
        return LoadModels(every_archive=True)
    specs: list[StartupModelSpec] = []
    for item in text.split(","):
        name, sep, url = item.strip().partition("=")
        if not sep:
            name, url = "", name
        url = url.strip()
        if url:
            specs.append(StartupModelSpec(url=url, model_name=name.strip() or None))
    return LoadModels(specs=tuple(specs))


def store_archives(model_store: Path) -> list[StartupModelSpec]:
    """``all``: every non-hidden archive file and folder directly in the store, in name order."""
    found: list[StartupModelSpec] = []
    with os.scandir(model_store) as entries:
        for entry in sorted(entries, key=lambda item: item.name):
            if entry.name.startswith("."):
                continue
            if entry.is_dir() or (entry.is_file() and entry.name.endswith(_ARCHIVE_SUFFIXES)):
                found.append(StartupModelSpec(url=entry.name))
    return found


def startup_specs(value: str, model_store: Path | None) -> list[StartupModelSpec]:
    parsed = parse_load_models(value)
    if not parsed.every_archive:
        return list(parsed.specs)
    return store_archives(model_store) if model_store is not None and model_store.is_dir() else []
