"""The function nodes of the workflow benchmark's ``pipe`` (``bench/workflows.py``): ``pre`` and ``post``
around the benchmark CNN. The same file is the workflow's handler (``.war``) and the handler of the plain
models ``pre`` and ``post`` (``.mar``s with ``pipe_nodes:pre`` / ``pipe_nodes:post`` as their handler),
which a client calls one after the other.

- ``pre``: a request ``{"image": [[[...]]]}`` (a 3x32x32 RGB image, values in [0, 1], as nested JSON
  lists) to the CNN's input: the image normalized per channel (CIFAR-10's mean and deviation), as raw
  little-endian float32 bytes (12 KiB), which ``bench_handler.py`` reads as it reads any raw body.
- ``post``: the CNN's answer (1000 raw float32 logits) to ``{"class": k, "score": s}``, the softmax of
  the top class rounded to 6 digits.

A row's input may come decoded (a dict: TorchServe's and Sluice's REST decode a JSON body) or as bytes
(a parent node's output; a KServe v2 BYTES element). TorchServe calls a workflow's functions once with
``data=None`` when it loads them: they return None then.
"""

import json
from typing import Any

import numpy as np

SHAPE = (3, 32, 32)
MEAN = np.array([0.4914, 0.4822, 0.4465], dtype=np.float32).reshape(3, 1, 1)
STD = np.array([0.2470, 0.2435, 0.2616], dtype=np.float32).reshape(3, 1, 1)


def _value(row: dict[str, Any]) -> Any:
    for key in ("body", "data"):
        if row.get(key) is not None:
            return row[key]
    return next(iter(row.values()))


def _decoded(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        value = value.decode("utf-8")
    if isinstance(value, str):
        value = json.loads(value)
    return value


def preprocess_image(request: Any) -> bytes:
    """One request (decoded or not) to the CNN's input bytes."""
    image = np.asarray(_decoded(request)["image"], dtype=np.float32).reshape(SHAPE)
    normalized: np.ndarray[Any, Any] = (image - MEAN) / STD
    return normalized.astype("<f4").tobytes()


def top_class(logits_bytes: bytes | bytearray) -> dict[str, Any]:
    """The CNN's output bytes to ``{"class": k, "score": s}``."""
    logits = np.frombuffer(bytes(logits_bytes), dtype="<f4")
    exponents = np.exp(logits - logits.max())
    best = int(exponents.argmax())
    return {"class": best, "score": round(float(exponents[best] / exponents.sum()), 6)}


def pre(data: list[dict[str, Any]] | None, context: Any) -> list[bytes] | None:
    if data is None:
        return None
    return [preprocess_image(_value(row)) for row in data]


def post(data: list[dict[str, Any]] | None, context: Any) -> list[dict[str, Any]] | None:
    if data is None:
        return None
    return [top_class(_value(row)) for row in data]
