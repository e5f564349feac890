"""The stateful benchmark handler: a two-layer GRU stepped once per request, its hidden state kept per
sequence (TorchServe's examples/stateful pattern: keyed by ``context.get_sequence_id(idx)``).

Rows: ``{"data" | "body": bytes}``, the step's input as raw little-endian float32. A batch holds one
step of each of several sequences; their inputs and hidden states are stacked into one forward call.
Answers: JSON ``{"sequence", "step", "checksum"}`` (steps count from 1 per sequence, so a client can
check that none was lost or run twice).

With ``save_state: true`` under model-config.yaml's ``handler:``, it also defines Sluice's
``save_sequence_state`` / ``load_sequence_state`` (TorchServe never calls them): the state is the
step count and the hidden state as raw float32 bytes.
"""

import json
import struct
from typing import Any

import numpy as np
import torch
from ts.torch_handler.base_handler import BaseHandler

STEP = struct.Struct("<q")


class SequenceHandler(BaseHandler):  # type: ignore[misc]  # ts ships no type information
    def initialize(self, context: Any) -> None:
        super().initialize(context)
        settings = (context.model_yaml_config or {}).get("handler") or {}
        self.input_size = int(settings.get("input_size", 256))
        self.hidden_shape = (int(settings.get("layers", 2)), int(settings.get("hidden_size", 1024)))
        self.hidden: dict[str, torch.Tensor] = {}
        self.steps: dict[str, int] = {}
        if settings.get("save_state"):
            self.save_sequence_state = self._save
            self.load_sequence_state = self._load

    def handle(self, data: list[dict[str, Any]], context: Any) -> list[str]:
        sequences = [context.get_sequence_id(idx) for idx in range(len(data))]
        for idx, sid in enumerate(sequences):
            if context.get_request_header(idx, context.header_key_sequence_start) == "true":
                self.hidden.pop(sid, None)
                self.steps.pop(sid, None)
        inputs = torch.stack([self._input(row) for row in data])
        hidden = torch.stack(
            [self.hidden.get(sid, torch.zeros(self.hidden_shape)) for sid in sequences], dim=1
        )
        with torch.inference_mode():
            updated = self.model(inputs, hidden)
        answers = []
        for idx, sid in enumerate(sequences):
            self.hidden[sid] = updated[:, idx].clone()
            self.steps[sid] = self.steps.get(sid, 0) + 1
            answers.append(
                json.dumps(
                    {"sequence": sid, "step": self.steps[sid], "checksum": float(updated[:, idx].sum())}
                )
            )
            if context.get_request_header(idx, context.header_key_sequence_end) == "true":
                self.hidden.pop(sid, None)
                self.steps.pop(sid, None)
        return answers

    def _input(self, row: dict[str, Any]) -> torch.Tensor:
        value: bytes = row.get("data") or row.get("body") or b""
        return torch.from_numpy(np.frombuffer(bytes(value), dtype="<f4").copy()).reshape(self.input_size)

    def _save(self, sequence_id: str) -> bytes | None:
        hidden = self.hidden.get(sequence_id)
        if hidden is None:
            return None
        return STEP.pack(self.steps[sequence_id]) + hidden.numpy().astype("<f4").tobytes()

    def _load(self, sequence_id: str, state: bytes) -> None:
        (self.steps[sequence_id],) = STEP.unpack_from(state)
        values = np.frombuffer(state, dtype="<f4", offset=STEP.size).copy()
        self.hidden[sequence_id] = torch.from_numpy(values).reshape(self.hidden_shape)
