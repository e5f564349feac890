"""The warm-up requests a model archive may name (model-config.yaml ``warmupRequests``): a JSON file
inside the archive holding a list of request bodies, each a string (sent as ``text/plain``) or a
JSON value (sent as ``application/json``), as a TorchServe REST client would send them. A worker
runs each through its handler before it reports READY (``sluice_worker.warmup``); the manager
checks the file when the version registers, so a bad one refuses the registration."""

import json
from dataclasses import dataclass
from pathlib import Path

# Bounds of a warm-up file: it is read by every worker of the version before it serves.
MAX_FILE_BYTES = 16 * 1024 * 1024
MAX_REQUESTS = 1000


class WarmupFileError(ValueError):
    """The file is missing, outside the model's folder, or not a list of request bodies."""


@dataclass(frozen=True)
class WarmupRequest:
    body: bytes
    content_type: str


def read_requests(model_dir: Path, name: str) -> list[WarmupRequest]:
    """The requests of the file ``name`` (relative to ``model_dir``, which it may not leave)."""
    root = model_dir.resolve()
    path = (root / name).resolve()
    if not path.is_relative_to(root) or path == root:
        raise WarmupFileError(f"warmupRequests: {name!r} is outside the model's folder")
    if not path.is_file():
        raise WarmupFileError(f"warmupRequests: {name!r} is not a file in the archive")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise WarmupFileError(f"warmupRequests: {name!r} is larger than {MAX_FILE_BYTES} bytes")
    try:
        items = json.loads(path.read_bytes())
    except (UnicodeDecodeError, ValueError) as exc:
        raise WarmupFileError(f"warmupRequests: {name!r} is not JSON: {exc}") from None
    if not isinstance(items, list) or not items:
        raise WarmupFileError(f"warmupRequests: {name!r} must hold a non-empty JSON list of request bodies")
    if len(items) > MAX_REQUESTS:
        raise WarmupFileError(f"warmupRequests: {name!r} holds more than {MAX_REQUESTS} requests")
    return [_request(item) for item in items]


def _request(item: object) -> WarmupRequest:
    if isinstance(item, str):
        return WarmupRequest(item.encode(), "text/plain")
    return WarmupRequest(json.dumps(item).encode(), "application/json")
