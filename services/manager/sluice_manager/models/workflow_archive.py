"""Reading a workflow archive (``.war``, made by torch-workflow-archiver): found in the workflow store
(never outside it) or downloaded under ``allowed_urls``, unpacked with the model archives' limits and
path checks into a private staging folder, its ``WAR-INF/MANIFEST.json`` and spec read, and one
model folder prepared per function node (the workflow's files plus a manifest naming
``<handler file>:<function>``, as TorchServe makes a function node's model).

Blocking file work runs in threads; the staging folder is the caller's to remove (an interrupted
registration leaves a ``.staging-`` folder, which the manager's next start removes).
"""

import asyncio
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sluice.errors import ErrorCode, SluiceError
from sluice.registry import names

from sluice_manager.models import archives, url_policy
from sluice_manager.models.fetch import Download, fetch
from sluice_manager.models.workflow_spec import WorkflowSpec, invalid_workflow, parse_spec

WAR_INF = "WAR-INF"
MANIFEST = f"{WAR_INF}/MANIFEST.json"
MAR_MANIFEST = "MAR-INF/MANIFEST.json"
FUNCTION_MODEL_VERSION = "1.0"
DOWNLOAD_FAILED = "org.pytorch.serve.archive.DownloadArchiveException"


@dataclass(frozen=True)
class PreparedWorkflow:
    spec: WorkflowSpec
    # Node name -> the folder its function model is registered from.
    function_dirs: dict[str, Path]


def workflow_not_found(message: str) -> SluiceError:
    return SluiceError(ErrorCode.WORKFLOW_NOT_FOUND, message)


async def prepare(
    url: str,
    workflow_name: str | None,
    *,
    workflow_store: Path | None,
    staging: Path,
    downloader: Download | None,
    limits: archives.ExtractionLimits,
) -> PreparedWorkflow:
    """Fetch, unpack and read the archive ``url`` into ``staging``."""
    if workflow_store is None:
        raise workflow_not_found("Workflow store has not been configured.")
    if ".." in url:
        raise workflow_not_found(f"Relative path is not allowed in url: {archives.printable(url)}")
    await asyncio.to_thread(staging.mkdir, parents=True, exist_ok=True)
    try:
        local = await fetch(
            url, model_store=workflow_store, work_dir=staging / "download", downloader=downloader
        )
    except SluiceError as error:
        if error.code is not ErrorCode.MODEL_NOT_FOUND:
            raise
        # TorchServe answers a URL that allowed_urls refuses, and a name missing from the store, with
        # WorkflowNotFoundException.
        if url_policy.is_url(url):
            raise workflow_not_found(error.message) from None
        raise workflow_not_found(f"Workflow not found in workflow store: {archives.printable(url)}") from None
    try:
        unpacked = await asyncio.to_thread(archives.unpack, local.path, local.kind, staging, limits)
    finally:
        local.discard()
    return await asyncio.to_thread(_read, url, workflow_name, unpacked, staging)


def _read(url: str, workflow_name: str | None, unpacked: Path, staging: Path) -> PreparedWorkflow:
    manifest = _manifest(unpacked)
    workflow = manifest.get("workflow")
    if not isinstance(workflow, dict):
        raise invalid_workflow("Missing Workflow entry in manifest file.")
    name = workflow_name or workflow.get("workflowName")
    if not isinstance(name, str) or not name:
        raise invalid_workflow("Workflow name is not defined.")
    if not names.is_valid(name):
        raise SluiceError(ErrorCode.INVALID_ARGUMENT, f"Invalid workflow name: {names.printable(name)}")
    if manifest.get("archiverVersion") is None:
        raise invalid_workflow("Workflow archive version is not defined.")
    if manifest.get("createdOn") is None:
        raise invalid_workflow("Workflow archive createdOn is not defined.")
    spec_file = _member(unpacked, workflow.get("specFile"), "spec file")
    handler_file = _member(unpacked, workflow.get("handler"), "handler file")
    spec = parse_spec(name, url, spec_file.read_bytes(), registered_unix_ms=int(time.time() * 1000))
    function_dirs = {
        member.node: _function_model(
            unpacked, staging / f"node-{member.node}", member.model, handler_file.name, member.node
        )
        for member in spec.members
        if not member.url
    }
    return PreparedWorkflow(spec, function_dirs)


def _manifest(unpacked: Path) -> dict[str, Any]:
    path = unpacked / MANIFEST
    if not path.is_file() or path.stat().st_size > 1024 * 1024:
        return {}
    try:
        loaded = json.loads(path.read_bytes())
    except (ValueError, RecursionError):
        raise invalid_workflow("Failed to parse signature.json.") from None
    return loaded if isinstance(loaded, dict) else {}


def _member(unpacked: Path, name: Any, what: str) -> Path:
    """A file the manifest names, inside the archive's top folder (the archiver keeps base names)."""
    if not isinstance(name, str) or not name or "/" in name or "\\" in name or name in (".", ".."):
        raise invalid_workflow(f"The workflow manifest names no valid {what}.")
    path = unpacked / name
    if path.is_symlink() or not path.is_file():
        raise invalid_workflow(f"The workflow archive has no {what} {archives.printable(name)}.")
    return path


def _function_model(unpacked: Path, folder: Path, model: str, handler_file: str, function: str) -> Path:
    """A model folder for a function node: the workflow's files (not its WAR-INF) and a manifest whose
    handler is ``<handler file>:<function>``."""
    shutil.copytree(unpacked, folder, ignore=shutil.ignore_patterns(WAR_INF), symlinks=True)
    manifest = {
        "createdOn": time.strftime("%d/%m/%Y %H:%M:%S"),
        "runtime": "python",
        "model": {
            "modelName": model,
            "handler": f"{handler_file}:{function}",
            "modelVersion": FUNCTION_MODEL_VERSION,
        },
        "archiverVersion": "sluice-workflow",
    }
    os.makedirs(folder / "MAR-INF", exist_ok=True)
    (folder / MAR_MANIFEST).write_text(json.dumps(manifest, indent=2))
    return folder
