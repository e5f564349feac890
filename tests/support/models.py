"""Test models, laid out the way torch-model-archiver 0.12 writes them, and handler sources for tests.

Layout: the archive's files at the root plus ``MAR-INF/MANIFEST.json`` (createdOn, runtime, model
{modelName, serializedFile?, handler, modelFile?, modelVersion, configFile?}, archiverVersion).
``.mar`` is a zip of that tree; ``.tar.gz`` puts it under a ``<model name>/`` folder; a model folder is
the tree itself (what the manager unpacks to and what ``--archive-format no-archive`` writes).

Torch is imported only by the builders of the torch models, so gateway tests can use the rest.
"""

import io
import json
import tarfile
import textwrap
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

ARCHIVER_VERSION = "0.12.0"
MANIFEST_PATH = "MAR-INF/MANIFEST.json"


@dataclass(frozen=True)
class ModelSpec:
    name: str
    # MANIFEST "handler": a root file ("handler.py", "handler.py:fn") or a built-in ("image_classifier").
    handler: str
    # Files at the archive root: name -> content.
    files: Mapping[str, bytes | str] = field(default_factory=dict)
    version: str = "1.0"
    serialized_file: str | None = None
    model_file: str | None = None
    config_file: str | None = None
    runtime: str = "python"

    def manifest(self) -> dict[str, Any]:
        model: dict[str, Any] = {"modelName": self.name}
        if self.serialized_file:
            model["serializedFile"] = self.serialized_file
        model["handler"] = self.handler
        if self.model_file:
            model["modelFile"] = self.model_file
        model["modelVersion"] = self.version
        if self.config_file:
            model["configFile"] = self.config_file
        return {
            "createdOn": datetime.now().strftime("%d/%m/%Y %H:%M:%S"),
            "runtime": self.runtime,
            "model": model,
            "archiverVersion": ARCHIVER_VERSION,
        }

    def tree(self) -> dict[str, bytes]:
        """Every file of the archive, by relative path."""
        out = {
            name: content.encode() if isinstance(content, str) else content
            for name, content in self.files.items()
        }
        out[MANIFEST_PATH] = json.dumps(self.manifest(), indent=2).encode()
        return out


def write_model_dir(spec: ModelSpec, dest: Path) -> Path:
    """The unpacked model folder at ``dest``."""
    for name, content in spec.tree().items():
        path = dest / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    return dest


def write_mar(spec: ModelSpec, out_dir: Path) -> Path:
    """``<out_dir>/<name>.mar``: a zip with the files at the root (the archiver's default format)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{spec.name}.mar"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in spec.tree().items():
            archive.writestr(name, content)
    return path


def write_tar_gz(spec: ModelSpec, out_dir: Path) -> Path:
    """``<out_dir>/<name>.tar.gz``: the archiver's ``tgz`` format, files under ``<name>/``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{spec.name}.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        for name, content in spec.tree().items():
            info = tarfile.TarInfo(f"{spec.name}/{name}")
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
    return path


def _source(text: str) -> str:
    return textwrap.dedent(text).lstrip()


# Function-style echo. The row's "kind" input picks what it returns, to exercise TorchServe's
# serialization (bytes as-is, str UTF-8, tensor via torch.save, anything else json.dumps(indent=2))
# and what the handler sees (headers, request ids, system properties, cwd).
ECHO_HANDLER = _source("""
    import os

    import torch


    def _text(row, key, default=""):
        value = row.get(key)
        return default if value is None else bytes(value).decode("utf-8")


    def handle(data, context):
        if data is None:  # TorchServe initializes a function entry point with handle(None, context)
            return None
        out = []
        for idx, row in enumerate(data):
            if context.get_request_header(idx, "describe") == "True":
                out.append({"description": "echo", "model": context.model_name})
                continue
            kind = _text(row, "kind", "bytes")
            payload = bytes(row.get("data") or b"")
            if kind == "bytes":
                out.append(payload)
            elif kind == "str":
                out.append(payload.decode("utf-8"))
            elif kind == "json":
                out.append({"echo": payload.decode("utf-8"), "numbers": [1, 2, 3], "nested": {"ok": True}})
            elif kind == "tensor":
                out.append(torch.tensor(list(payload), dtype=torch.int64))
            elif kind == "headers":
                out.append(context.get_all_request_header(idx))
            elif kind == "context":
                out.append({
                    "request_id": context.get_request_id(idx),
                    "request_ids": {str(k): v for k, v in context.request_ids.items()},
                    "cwd": os.getcwd(),
                    "system_properties": context.system_properties,
                    "manifest": context.manifest,
                    "model_yaml_config": context.model_yaml_config,
                    "torch_threads": torch.get_num_threads(),
                })
            elif kind == "status":
                context.set_response_status(418, "I'm a teapot", idx)
                context.set_response_content_type(idx, "text/plain")
                context.set_response_header(idx, "x-echo", "yes")
                out.append(payload)
            else:
                raise ValueError("unknown kind " + kind)
        return out
""")

# Records every batch it gets (size and request ids) as a JSON line in <model_dir>/batches.jsonl,
# sleeps model-config.yaml's sleep_s per batch (default 0), and echoes each row's "data".
BATCH_RECORDER_HANDLER = _source("""
    import json
    import os
    import time


    def handle(data, context):
        if data is None:
            return None
        line = {"size": len(data), "request_ids": [context.get_request_id(i) for i in range(len(data))]}
        path = os.path.join(context.system_properties["model_dir"], "batches.jsonl")
        with open(path, "a") as f:
            f.write(json.dumps(line) + "\\n")
        time.sleep(float((context.model_yaml_config or {}).get("sleep_s", 0)))
        return [bytes(row.get("data") or b"") for row in data]
""")

_STREAMING_TEMPLATE = """
    {import_line}


    def handle(data, context):
        if data is None:
            return None
        chunks = int(bytes(data[0].get("chunks") or b"3").decode())
        for i in range(chunks):
            chunk = ["chunk-%d" % i for _ in data]
            send_intermediate_predict_response(chunk, context.request_ids, "Intermediate", 200, context)
        return ["final" for _ in data]
"""

# Streams the input "chunks" (default 3) intermediate results "chunk-<i>", then returns "final".
STREAMING_HANDLER = _source(
    _STREAMING_TEMPLATE.format(
        import_line="from ts.handler_utils.utils import send_intermediate_predict_response"
    )
)
# The same through the deprecated import path TorchServe still supports.
STREAMING_OTF_HANDLER = _source(
    _STREAMING_TEMPLATE.format(
        import_line="from ts.protocol.otf_message_handler import send_intermediate_predict_response"
    )
)


def prediction_exception_handler(code: int, message: str) -> str:
    """A handler that fails every batch with ``PredictionException(message, code)``."""
    return _source(f"""
        from ts.utils.util import PredictionException


        def handle(data, context):
            if data is None:
                return None
            raise PredictionException({message!r}, {code})
    """)


# Any other exception: TorchServe answers 503 "Prediction failed".
FAILING_HANDLER = _source("""
    def handle(data, context):
        if data is None:
            return None
        raise RuntimeError("the handler broke")
""")

# Wrong outputs, by the row's "mode": "extra" (one result too many), "not_list", "object" (not serializable).
BAD_OUTPUT_HANDLER = _source("""
    def handle(data, context):
        if data is None:
            return None
        mode = bytes(data[0].get("mode") or b"extra").decode()
        if mode == "not_list":
            return "not a list"
        if mode == "object":
            return [object() for _ in data]
        return [b"x"] * (len(data) + 1)
""")

# Leaves the worker process through sys.exit() in the middle of a batch.
EXITING_HANDLER = _source("""
    import sys


    def handle(data, context):
        if data is None:
            return None
        sys.exit(7)
""")

# Sleeps the row's "sleep_s" (default: model-config.yaml's sleep_s, else 30) seconds, then echoes "data".
SLEEPING_HANDLER = _source("""
    import time


    def handle(data, context):
        if data is None:
            return None
        default = str((context.model_yaml_config or {}).get("sleep_s", 30))
        time.sleep(float(bytes(data[0].get("sleep_s") or default.encode()).decode()))
        return [bytes(row.get("data") or b"") for row in data]
""")

# A BaseHandler subclass for the MLPs: rows carry a JSON list of 4 floats in "data" (or "body").
MLP_HANDLER = _source("""
    import json

    import torch
    from ts.torch_handler.base_handler import BaseHandler


    class MLPHandler(BaseHandler):
        def preprocess(self, data):
            rows = [json.loads(bytes(row.get("data") or row.get("body"))) for row in data]
            return torch.tensor(rows, dtype=torch.float32, device=self.device)

        def postprocess(self, data):
            return data.tolist()
""")

MLP_MODEL_SOURCE = _source("""
    import torch
    from torch import nn


    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.hidden = nn.Linear(4, 8)
            self.out = nn.Linear(8, 3)

        def forward(self, x):
            return self.out(torch.relu(self.hidden(x)))
""")

# A stateful handler in the pattern of TorchServe's examples/stateful: a running total per sequence
# (a torch tensor), keyed by context.get_sequence_id(idx); a start header resets it, an end header
# drops it. Each answer says which process computed it and what the handler saw. With
# ``save_state`` it defines Sluice's save/restore pair (sluice_worker.sequence_state).
STATEFUL_HANDLER = _source("""
    import json
    import os
    import struct
    import time

    import torch
    from ts.torch_handler.base_handler import BaseHandler


    class Accumulator(BaseHandler):
        def initialize(self, context):
            self.context = context
            self.totals = {}
            handler_config = context.model_yaml_config.get("handler") or {}
            self.sleep_s = float(handler_config.get("sleep_s", 0))
            self.state_bytes = int(handler_config.get("state_bytes", 0))
            self.initialized = True

        def handle(self, data, context):
            out = []
            batch = [context.get_sequence_id(idx) for idx in range(len(data))]
            for idx, row in enumerate(data):
                sid = context.get_sequence_id(idx)
                start = context.get_request_header(idx, context.header_key_sequence_start) == "true"
                end = context.get_request_header(idx, context.header_key_sequence_end) == "true"
                if start:
                    self.totals.pop(sid, None)
                raw = row.get("data") or row.get("body")
                v2 = isinstance(raw, dict)
                if v2:  # KServe v2 (TorchServe's OIP form): the first input's value
                    raw = raw["inputs"][0]["data"][0]
                value = int(raw.decode() if isinstance(raw, (bytes, bytearray)) else raw)
                total = self.totals.get(sid, torch.zeros((), dtype=torch.int64)) + value
                self.totals[sid] = total
                answer = json.dumps({
                    "sequence": sid, "total": int(total), "pid": os.getpid(), "batch": batch,
                    "start": start, "end": end,
                })
                if v2:
                    output = {"name": "answer", "datatype": "BYTES", "shape": [1], "data": [answer]}
                    answer = {"outputs": [output]}
                out.append(answer)
                if end:
                    self.totals.pop(sid, None)
            if self.sleep_s:
                time.sleep(self.sleep_s)
            return out
""")

SEQUENCE_STATE_HOOKS = _source("""

        def save_sequence_state(self, sequence_id):
            total = self.totals.get(sequence_id)
            if total is None:
                return None
            return struct.pack("<q", int(total)) + b"\\0" * self.state_bytes

        def load_sequence_state(self, sequence_id, state):
            self.totals[sequence_id] = torch.tensor(struct.unpack("<q", state[:8])[0])
""")


def stateful_model(
    name: str = "stateful",
    version: str = "1.0",
    *,
    save_state: bool = False,
    sleep_s: float = 0.0,
    state_bytes: int = 0,
) -> ModelSpec:
    """TorchServe's stateful example (a per-sequence total); ``state_bytes`` pads saved states."""
    source = (
        STATEFUL_HANDLER + "\n" + textwrap.indent(SEQUENCE_STATE_HOOKS, "    ")
        if save_state
        else STATEFUL_HANDLER
    )
    return ModelSpec(
        name=name,
        handler="handler.py",
        files={
            "handler.py": source,
            "model-config.yaml": f"handler:\n  sleep_s: {sleep_s}\n  state_bytes: {state_bytes}\n",
        },
        version=version,
        config_file="model-config.yaml",
    )


# Two workers, each holding sequences in batches of 4, as the end-to-end sequence tests run them.
SEQUENCE_SERVING = (
    "minWorkers: 2\nmaxWorkers: 2\nbatchSize: 4\nmaxBatchDelay: 20\nsequenceBatching: true\n"
    "sequenceMaxIdleMSec: 60000\nmaxNumSequence: 64\nmaxSequenceJobQueueSize: 16\n"
)


def sequence_model(name: str, *, save_state: bool) -> ModelSpec:
    """:func:`stateful_model` served as sequences (:data:`SEQUENCE_SERVING`)."""
    spec = stateful_model(name, save_state=save_state)
    config = spec.files["model-config.yaml"]
    assert isinstance(config, str)
    files = {**spec.files, "model-config.yaml": config + SEQUENCE_SERVING}
    return replace(spec, files=files)


MLP_SEED = 1234


def _function_model(name: str, source: str, version: str = "1.0", config: str | None = None) -> ModelSpec:
    files: dict[str, bytes | str] = {"handler.py": source}
    if config is not None:
        files["model-config.yaml"] = config
    return ModelSpec(
        name=name,
        handler="handler.py",
        files=files,
        version=version,
        config_file="model-config.yaml" if config is not None else None,
    )


def echo_model(name: str = "echo", version: str = "1.0", config: str | None = None) -> ModelSpec:
    return _function_model(name, ECHO_HANDLER, version, config)


def batch_recorder_model(name: str = "recorder", version: str = "1.0", sleep_s: float = 0.0) -> ModelSpec:
    return _function_model(name, BATCH_RECORDER_HANDLER, version, f"sleep_s: {sleep_s}\n")


def streaming_model(name: str = "streamer", version: str = "1.0", *, otf_import: bool = False) -> ModelSpec:
    return _function_model(name, STREAMING_OTF_HANDLER if otf_import else STREAMING_HANDLER, version)


def prediction_exception_model(
    name: str = "refuser", version: str = "1.0", *, code: int = 404, message: str = "no such thing"
) -> ModelSpec:
    return _function_model(name, prediction_exception_handler(code, message), version)


def failing_model(name: str = "failing", version: str = "1.0") -> ModelSpec:
    return _function_model(name, FAILING_HANDLER, version)


def bad_output_model(name: str = "bad-output", version: str = "1.0") -> ModelSpec:
    return _function_model(name, BAD_OUTPUT_HANDLER, version)


def exiting_model(name: str = "exiting", version: str = "1.0") -> ModelSpec:
    return _function_model(name, EXITING_HANDLER, version)


# model-config.yaml autoscaling keys for tests (the defaults take seconds to a minute): one job per
# worker, up 0.3 s into a backlog, down after 3 s of less load, 0.5 s between two changes.
FAST_SCALING = (
    "targetJobsPerWorker: 1\nscaleUpAfterMSec: 300\nscaleDownAfterMSec: 3000\nscaleCooldownMSec: 500\n"
)


def sleeping_model(name: str = "sleeper", version: str = "1.0", sleep_s: float = 30.0) -> ModelSpec:
    return _function_model(name, SLEEPING_HANDLER, version, f"sleep_s: {sleep_s}\n")


def mlp_module() -> Any:
    """The MLP with its fixed (seeded) weights, as an eager ``torch.nn.Module`` in eval mode."""
    import torch

    namespace: dict[str, Any] = {}
    exec(compile(MLP_MODEL_SOURCE, "model.py", "exec"), namespace)
    torch.manual_seed(MLP_SEED)
    module = namespace["MLP"]()
    module.eval()
    return module


def mlp_expected(rows: list[list[float]]) -> list[list[float]]:
    """What the MLP models answer for ``rows`` (computed in the test process)."""
    import torch

    with torch.inference_mode():
        result: list[list[float]] = mlp_module()(torch.tensor(rows, dtype=torch.float32)).tolist()
    return result


def torchscript_mlp_model(name: str = "mlp-ts", version: str = "1.0") -> ModelSpec:
    """TorchScript: ``serializedFile`` model.pt, loaded by BaseHandler with ``torch.jit.load``."""
    import warnings

    import torch

    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        # trace, not script: scripting needs the module's source file.
        traced = torch.jit.trace(mlp_module(), torch.zeros(1, 4))  # type: ignore[no-untyped-call]
        torch.jit.save(traced, buffer)
    return ModelSpec(
        name=name,
        handler="handler.py",
        files={"handler.py": MLP_HANDLER, "model.pt": buffer.getvalue()},
        version=version,
        serialized_file="model.pt",
    )


def eager_mlp_model(name: str = "mlp-eager", version: str = "1.0") -> ModelSpec:
    """Eager: ``modelFile`` model.py (one class) plus a state dict, loaded by BaseHandler."""
    import torch

    buffer = io.BytesIO()
    torch.save(mlp_module().state_dict(), buffer)
    return ModelSpec(
        name=name,
        handler="handler.py",
        files={"handler.py": MLP_HANDLER, "model.py": MLP_MODEL_SOURCE, "model.pth": buffer.getvalue()},
        version=version,
        serialized_file="model.pth",
        model_file="model.py",
    )
