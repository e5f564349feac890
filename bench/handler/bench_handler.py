"""The benchmark handler: one TorchServe ``BaseHandler`` for every benchmark model (mlp, cnn, stream).

Settings come from model-config.yaml's ``handler:`` section: ``input_shape`` (list of ints),
``stream_messages`` (0: answer once; N: send N intermediate messages, then the final one) and
``stream_gap_ms`` (pause after each intermediate message).

Rows: TorchServe gRPC and REST give ``{"data" | "body": bytes}`` (raw little-endian float32); Sluice's
KServe v2 tensor mode gives ``{"INPUT__0": torch.Tensor}``, its default (TorchServe OIP) mode
``{"body": {"inputs": [{"data": [...]}]}}``. Answers: the output row as raw float32 bytes,
``{"OUTPUT__0": tensor}`` for tensor rows, v2 JSON for OIP rows. Streaming messages carry the wall
clock at the handler's send (``<qi``: time.time_ns(), index) so the client can measure the relay
latency; a request may set ``messages`` and ``gap_ms`` inputs to override the model's settings.
"""

import json
import struct
import time
from typing import Any

import torch
from ts.handler_utils.utils import send_intermediate_predict_response
from ts.torch_handler.base_handler import BaseHandler

STAMP = struct.Struct("<qi")
KSERVE_OUTPUT = "OUTPUT__0"


class BenchHandler(BaseHandler):  # type: ignore[misc]  # ts ships no type information
    def initialize(self, context: Any) -> None:
        super().initialize(context)
        settings = (context.model_yaml_config or {}).get("handler") or {}
        self.input_shape = tuple(int(dim) for dim in settings.get("input_shape", [64]))
        self.stream_messages = int(settings.get("stream_messages", 0))
        self.stream_gap_s = float(settings.get("stream_gap_ms", 0)) / 1000.0
        self.forms: list[str] = []

    def handle(self, data: list[dict[str, Any]], context: Any) -> list[Any]:
        if self.stream_messages:
            return self._stream(data, context)
        answers: list[Any] = super().handle(data, context)
        return answers

    def preprocess(self, data: list[dict[str, Any]]) -> torch.Tensor:
        tensors = []
        self.forms = []
        for row in data:
            value = row.get("data", row.get("body"))
            if value is None:
                value = next(iter(row.values()))
            if isinstance(value, str):
                value = json.loads(value)
            if isinstance(value, torch.Tensor):
                self.forms.append("tensor")
                tensors.append(value.to(torch.float32).reshape(self.input_shape))
            elif isinstance(value, dict):
                self.forms.append("oip")
                flat = value["inputs"][0]["data"]
                tensors.append(torch.tensor(flat, dtype=torch.float32).reshape(self.input_shape))
            else:
                self.forms.append("raw")
                buffer = value if isinstance(value, bytearray) else bytearray(value)
                tensors.append(torch.frombuffer(buffer, dtype=torch.float32).reshape(self.input_shape))
        return torch.stack(tensors)

    def postprocess(self, data: torch.Tensor) -> list[Any]:
        return [self._answer(form, row) for form, row in zip(self.forms, data, strict=True)]

    def _answer(self, form: str, row: torch.Tensor) -> Any:
        if form == "tensor":
            return {KSERVE_OUTPUT: row.unsqueeze(0)}
        if form == "oip":
            output = {
                "name": KSERVE_OUTPUT,
                "datatype": "FP32",
                "shape": [1, row.numel()],
                "data": row.tolist(),
            }
            return {"outputs": [output]}
        return row.contiguous().numpy().tobytes()

    def _stream(self, data: list[dict[str, Any]], context: Any) -> list[bytes]:
        messages, gap_s = self.stream_messages, self.stream_gap_s
        first = data[0] if data else {}
        if "messages" in first:
            messages = int(bytes(first["messages"]))
        if "gap_ms" in first:
            gap_s = float(bytes(first["gap_ms"])) / 1000.0
        for index in range(messages):
            stamps = [STAMP.pack(time.time_ns(), index) for _ in data]
            send_intermediate_predict_response(
                stamps, context.request_ids, "Intermediate Prediction success", 200, context
            )
            if gap_s:
                time.sleep(gap_s)
        return [STAMP.pack(time.time_ns(), messages) for _ in data]
