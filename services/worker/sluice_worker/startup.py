"""Before the handler loads: enter the model folder as TorchServe does (the version record comes
first, from :mod:`sluice_worker.broker.version_record`)."""

import os
import sys
from pathlib import Path


def search_paths(model_dir: str, handler: str) -> list[str]:
    """What TorchServe puts on a worker's PYTHONPATH: the handler's folder when the handler string
    names one (``path/to/handler.py:fn``), then the model folder."""
    paths = []
    module_part = handler.split(":", 1)[0] if ":" in handler else ""
    if "/" in module_part:
        paths.append(str(Path(model_dir, module_part.rsplit("/", 1)[0])))
    paths.append(model_dir)
    return paths


def enter_model_dir(model_dir: str, handler: str) -> None:
    """cwd = the model folder, and its modules importable (handlers import ``model.py`` and friends)."""
    os.chdir(model_dir)
    for path in reversed(search_paths(model_dir, handler)):
        if path not in sys.path:
            sys.path.insert(0, path)


def export_sequence_header_names(id_key: str, start_key: str, end_key: str) -> None:
    """Tell TorchServe's ``Context`` which request headers carry the sequence (it reads them from
    the environment when the handler loads)."""
    os.environ["TS_REQUEST_SEQUENCE_ID"] = id_key
    os.environ["TS_REQUEST_SEQUENCE_START"] = start_key
    os.environ["TS_REQUEST_SEQUENCE_END"] = end_key
