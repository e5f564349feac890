"""An unpacked archive's ``MAR-INF/MANIFEST.json`` and ``model-config.yaml``, schema-checked.

The manifest follows torch-model-archiver 0.12 (torchserve.md section 5.1); the YAML is read with
``yaml.safe_load`` only (no ``!!python`` tags) and must come out as plain JSON data.
"""

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from sluice_manager.models.archives import ArchiveError, is_within, printable

MANIFEST_FILE = Path("MAR-INF") / "MANIFEST.json"
MAX_MANIFEST_BYTES = 1024 * 1024
MAX_YAML_BYTES = 1024 * 1024
# Nodes a model-config.yaml may expand to: YAML aliases can make a small file a huge tree.
MAX_YAML_NODES = 100_000
RUNTIMES = frozenset({"python", "python3"})
DEFAULT_MODEL_VERSION = "1.0"

# TorchServe 0.12's built-in handlers (ts/torch_handler/*.py) that a manifest may name.
BUILTIN_HANDLERS = frozenset(
    {
        "base_handler",
        "image_classifier",
        "image_segmenter",
        "object_detector",
        "text_classifier",
        "text_handler",
        "vision_handler",
        "densenet_handler",
        "dali_handler",
        "dali_image_classifier",
        "vllm_handler",
        "trt_llm_handler",
    }
)
_HANDLER_MODULE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./-]*")


def _json_text(value: Any) -> Any:
    # Gson reads a JSON number into a String field ("modelVersion": 2 is "2"); keep that.
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return value


Text = Annotated[str, BeforeValidator(_json_text)]


class ManifestModel(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True, frozen=True)

    model_name: Text | None = Field(None, alias="modelName")
    model_version: Text | None = Field(None, alias="modelVersion")
    handler: Text | None = None
    serialized_file: Text | None = Field(None, alias="serializedFile")
    model_file: Text | None = Field(None, alias="modelFile")
    config_file: Text | None = Field(None, alias="configFile")
    requirements_file: Text | None = Field(None, alias="requirementsFile")
    envelope: Text | None = None


class Manifest(BaseModel):
    """MANIFEST.json as torch-model-archiver writes it; unknown keys are kept for the handler."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, frozen=True)

    runtime: Text = "python"
    model: ManifestModel
    created_on: Text | None = Field(None, alias="createdOn")
    archiver_version: Text | None = Field(None, alias="archiverVersion")

    @property
    def version(self) -> str:
        return self.model.model_version or DEFAULT_MODEL_VERSION


@dataclass(frozen=True)
class ArchiveContents:
    """What registration needs from an unpacked archive."""

    manifest: Manifest
    # Parsed model-config.yaml (empty without one): TorchServe hands the whole of it to the handler.
    model_yaml: dict[str, Any] = field(default_factory=dict)


def read_archive(model_dir: Path, archive: str) -> ArchiveContents:
    """Read and check the manifest and model-config.yaml of the archive unpacked in ``model_dir``."""
    manifest = read_manifest(model_dir, archive)
    for name in (manifest.model.serialized_file, manifest.model.model_file, manifest.model.config_file):
        if name:
            member_path(model_dir, name, archive)
    model_yaml: dict[str, Any] = {}
    if manifest.model.config_file:
        model_yaml = read_model_yaml(member_path(model_dir, manifest.model.config_file, archive), archive)
    return ArchiveContents(manifest=manifest, model_yaml=model_yaml)


def read_manifest(model_dir: Path, archive: str) -> Manifest:
    path = model_dir / MANIFEST_FILE
    if not path.is_file():
        raise ArchiveError(archive, "MAR-INF/MANIFEST.json is missing")
    if path.stat().st_size > MAX_MANIFEST_BYTES:
        raise ArchiveError(archive, "MAR-INF/MANIFEST.json is too large")
    try:
        raw = json.loads(path.read_bytes())
    except (ValueError, RecursionError) as exc:
        raise ArchiveError(archive, "MAR-INF/MANIFEST.json is not valid JSON") from exc
    if not isinstance(raw, dict):
        raise ArchiveError(archive, "MAR-INF/MANIFEST.json is not a JSON object")
    try:
        manifest = Manifest.model_validate(raw)
    except ValidationError as exc:
        raise ArchiveError(archive, f"MAR-INF/MANIFEST.json: {_first_problem(exc)}") from exc
    if manifest.runtime not in RUNTIMES:
        raise ArchiveError(archive, f"runtime {printable(manifest.runtime)!r} is not supported")
    return manifest


def _first_problem(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"])
    return f"{where}: {error['msg']}"


def member_path(model_dir: Path, name: str, archive: str) -> Path:
    """A file the manifest names: a relative path that stays inside the archive and exists."""
    shown = printable(name)
    if "\x00" in name or "\\" in name or name.startswith("/") or ".." in name.split("/"):
        raise ArchiveError(archive, f"file {shown!r} named in the manifest is not inside the archive")
    root = os.path.realpath(model_dir)
    target = os.path.realpath(os.path.join(root, name))
    if not is_within(root, target) or not os.path.isfile(target):
        raise ArchiveError(archive, f"file {shown!r} named in the manifest is not in the archive")
    return Path(target)


def read_model_yaml(path: Path, archive: str) -> dict[str, Any]:
    if path.stat().st_size > MAX_YAML_BYTES:
        raise ArchiveError(archive, "model-config.yaml is too large")
    try:
        loaded = yaml.safe_load(path.read_bytes())
    except (yaml.YAMLError, RecursionError) as exc:
        raise ArchiveError(
            archive, "model-config.yaml is not valid YAML (only plain YAML is accepted)"
        ) from exc
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ArchiveError(archive, "model-config.yaml must be a mapping")
    budget = [MAX_YAML_NODES]
    plain = _plain(loaded, budget, archive)
    assert isinstance(plain, dict)
    return plain


def _plain(value: Any, budget: list[int], archive: str) -> Any:
    """``value`` as JSON data (keys as strings, dates as ISO text), refusing an aliased tree that
    expands past :data:`MAX_YAML_NODES` nodes."""
    budget[0] -= 1
    if budget[0] < 0:
        raise ArchiveError(archive, "model-config.yaml expands to too many nodes")
    if isinstance(value, dict):
        return {str(key): _plain(item, budget, archive) for key, item in value.items()}
    if isinstance(value, list | tuple | set):
        return [_plain(item, budget, archive) for item in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes):
        raise ArchiveError(archive, "model-config.yaml holds binary data")
    return str(value)


def check_handler(handler: str, model_dir: Path, archive: str) -> str:
    """``handler`` if TorchServe's loader would find it in the archive or among its built-ins.

    Forms (torchserve.md section 4.1): ``module``, ``module.py``, ``path/to/module.py``, each with an
    optional ``:function``; or a built-in name such as ``image_classifier``."""
    shown = printable(handler)
    module, _, function = handler.partition(":")
    if function and not function.isidentifier():
        raise ArchiveError(archive, f"handler {shown!r}: {printable(function)!r} is not a function name")
    if not _HANDLER_MODULE.fullmatch(module) or ".." in module.split("/"):
        raise ArchiveError(archive, f"handler {shown!r} is not a module name or a path inside the archive")
    if _in_archive(module, model_dir) or _is_builtin(module):
        return handler
    raise ArchiveError(archive, f"handler {shown!r} is neither in the archive nor a built-in handler")


def _in_archive(module: str, model_dir: Path) -> bool:
    stem = module[:-3] if module.endswith(".py") else module
    candidates = [f"{stem}.py", f"{stem}/__init__.py"]
    if "/" not in stem:
        dotted = stem.replace(".", "/")
        candidates += [f"{dotted}.py", f"{dotted}/__init__.py"]
    root = os.path.realpath(model_dir)
    for candidate in candidates:
        target = os.path.realpath(os.path.join(root, candidate))
        if is_within(root, target) and os.path.isfile(target):
            return True
    return False


def _is_builtin(module: str) -> bool:
    name = module.removeprefix("ts.torch_handler.")
    return name in BUILTIN_HANDLERS
