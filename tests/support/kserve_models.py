"""KServe v2 test models: handlers in both modes (TorchServe OIP JSON and tensor mode), with their
model-config.yaml ``sluice:`` sections. Imports nothing of Sluice's, so the compat tier can use it."""

import io
import textwrap
from typing import Any

from tests.support.models import MLP_MODEL_SOURCE, ModelSpec, mlp_module


def _source(text: str) -> str:
    return textwrap.dedent(text).lstrip()


def _spec(name: str, files: dict[str, bytes | str], config: str, **kw: Any) -> ModelSpec:
    return ModelSpec(
        name=name,
        handler="handler.py",
        files={**files, "model-config.yaml": _source(config)},
        config_file="model-config.yaml",
        **kw,
    )


# TorchServe OIP style: the row's "body" is v2 JSON; answers OUTPUT0 = INPUT0 + 1 computed by torch, and
# echoes the request's parameters in a BYTES output PARAMS when asked for.
ADD_ONE_HANDLER = _source("""
    import json

    import torch


    def handle(data, context):
        if data is None:
            return None
        out = []
        for row in data:
            body = row["body"]
            (tensor,) = [t for t in body["inputs"] if t["name"] == "INPUT0"]
            x = torch.tensor(tensor["data"], dtype=torch.float32).reshape(tensor["shape"])
            y = (x + 1).flatten().tolist()
            outputs = [{"name": "OUTPUT0", "datatype": "FP32", "shape": list(x.shape), "data": y}]
            outputs.append({"name": "PARAMS", "datatype": "BYTES", "shape": [1],
                            "data": [json.dumps(body.get("parameters", {}), sort_keys=True)]})
            out.append({"model_name": body["model_name"], "outputs": outputs})
        return out
""")

ADD_ONE_CONFIG = """
    batchSize: 4
    maxBatchDelay: 50
    sluice:
      max_batch_size: 8
      inputs:
        - {name: INPUT0, datatype: FP32, shape: [4]}
      outputs:
        - {name: OUTPUT0, datatype: FP32, shape: [4]}
        - {name: PARAMS, datatype: BYTES, shape: [1]}
"""

# TorchServe OIP style, no declaration: every input comes back unchanged as output "OUT_<name>" (the
# tensor dict the handler received, renamed), plus SEEN: a BYTES output holding the JSON of every input's
# data as the handler saw it.
ECHO_JSON_HANDLER = _source("""
    import json


    def handle(data, context):
        if data is None:
            return None
        out = []
        for row in data:
            inputs = row["body"]["inputs"]
            outputs = [{**tensor, "name": "OUT_" + tensor["name"]} for tensor in inputs]
            seen = json.dumps({tensor["name"]: tensor["data"] for tensor in inputs})
            outputs.append({"name": "SEEN", "datatype": "BYTES", "shape": [1], "data": [seen]})
            out.append({"outputs": outputs})
        return out
""")

# Tensor mode, numpy: every input comes back as output "OUT_<name>", unchanged (BYTES included). Records
# the batch sizes it saw in <model_dir>/batches.txt.
ECHO_TENSORS_HANDLER = _source("""
    import os

    import numpy as np


    def handle(data, context):
        if data is None:
            return None
        with open(os.path.join(context.system_properties["model_dir"], "batches.txt"), "a") as f:
            f.write(f"{len(data)}\\n")
        for row in data:
            for value in row.values():
                assert isinstance(value, np.ndarray), type(value)
        return [{f"OUT_{name}": value for name, value in row.items()} for row in data]
""")

ECHO_TENSORS_CONFIG = """
    batchSize: 8
    maxBatchDelay: 100
    sluice:
      tensor_handler: true
"""

# Tensor mode, torch: the seeded MLP of tests/support/models.py (eager, state dict) on INPUT0 [-1, 4].
MLP_TENSOR_HANDLER = _source("""
    import torch
    from ts.torch_handler.base_handler import BaseHandler


    class MLPTensorHandler(BaseHandler):
        def handle(self, data, context):
            with torch.inference_mode():
                return [{"OUTPUT0": self.model(row["INPUT0"].to(self.device))} for row in data]
""")

MLP_TENSOR_CONFIG = """
    sluice:
      tensor_handler: true
      tensor_library: torch
      max_batch_size: 16
      inputs:
        - {name: INPUT0, datatype: FP32, shape: [4]}
      outputs:
        - {name: OUTPUT0, datatype: FP32, shape: [3]}
"""

# Decoupled streaming in OIP style: parameters["chunks"] intermediate responses (CHUNK = i), then a
# final one with CHUNK = -1, or none at all (returns None) when parameters["empty_final"] is true.
STREAMER_HANDLER = _source("""
    from ts.handler_utils.utils import send_intermediate_predict_response


    def _chunk(value):
        return {"outputs": [{"name": "CHUNK", "datatype": "INT32", "shape": [1], "data": [value]}]}


    def handle(data, context):
        if data is None:
            return None
        params = data[0]["body"].get("parameters", {})
        for i in range(int(params.get("chunks", 3))):
            send_intermediate_predict_response([_chunk(i)], context.request_ids, "Intermediate", 200, context)
        return [None if params.get("empty_final") else _chunk(-1)]
""")

STREAMER_CONFIG = """
    sluice:
      decoupled: true
      outputs:
        - {name: CHUNK, datatype: INT32, shape: [1]}
"""


# A stand-in for a model behind Modular MAX's KServe gRPC client: the prompt arrives as the characters'
# code points (INT32 `prompt`), the answer goes back the same way (INT32 `response`), at most
# `max_tokens` (a string parameter) characters long.
MAX_CHAT_HANDLER = _source("""
    def handle(data, context):
        if data is None:
            return None
        out = []
        for row in data:
            body = row["body"]
            (prompt,) = [t for t in body["inputs"] if t["name"] == "prompt"]
            text = "".join(chr(c) for c in prompt["data"])
            limit = int(body.get("parameters", {}).get("max_tokens", "100"))
            answer = f"You asked: {text}"[:limit]
            codes = [ord(c) for c in answer]
            response = {"name": "response", "datatype": "INT32", "shape": [len(codes)], "data": codes}
            out.append({"outputs": [response]})
        return out
""")

MAX_CHAT_CONFIG = """
    sluice:
      inputs:
        - {name: prompt, datatype: INT32, shape: [-1]}
      outputs:
        - {name: response, datatype: INT32, shape: [-1]}
"""


def max_chat_model(name: str = "max_chat") -> ModelSpec:
    return _spec(name, {"handler.py": MAX_CHAT_HANDLER}, MAX_CHAT_CONFIG)


def add_one_model(name: str = "add_one") -> ModelSpec:
    return _spec(name, {"handler.py": ADD_ONE_HANDLER}, ADD_ONE_CONFIG)


def echo_json_model(name: str = "echo_json") -> ModelSpec:
    return _spec(name, {"handler.py": ECHO_JSON_HANDLER}, "sluice: {}\n")


def echo_tensors_model(name: str = "echo_tensors") -> ModelSpec:
    return _spec(name, {"handler.py": ECHO_TENSORS_HANDLER}, ECHO_TENSORS_CONFIG)


def mlp_tensor_model(name: str = "mlp_tensor") -> ModelSpec:
    import torch

    buffer = io.BytesIO()
    torch.save(mlp_module().state_dict(), buffer)
    files: dict[str, bytes | str] = {
        "handler.py": MLP_TENSOR_HANDLER,
        "model.py": MLP_MODEL_SOURCE,
        "model.pth": buffer.getvalue(),
    }
    return _spec(name, files, MLP_TENSOR_CONFIG, serialized_file="model.pth", model_file="model.py")


def streamer_model(name: str = "streamer") -> ModelSpec:
    return _spec(name, {"handler.py": STREAMER_HANDLER}, STREAMER_CONFIG)
