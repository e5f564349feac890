"""The request and response forms the tiny_gpt handlers speak (no torch, no model: shared by both handlers).

A handler row is TorchServe's dict of request parameters; the body is under ``"data"`` or ``"body"``:

- TorchServe gRPC: ``{"data": bytearray(b"Hello")}``; the prompt is the bytes. An extra input
  ``max_new_tokens`` (``b"16"``) sets the budget.
- TorchServe REST: ``text/plain`` arrives as ``str`` (the prompt), ``application/json`` as a dict
  ``{"prompt": "Hello", "max_new_tokens": 16}``, anything else as bytes (the prompt). Bytes or a str that
  parse as a JSON object with a ``prompt`` or ``inputs`` key are read as that object (TorchServe hands
  JSON over undecoded when ``TS_DECODE_INPUT_REQUEST=false``).
- Form fields (multipart or urlencoded): ``prompt`` and optionally ``max_new_tokens``.
- KServe v2 JSON: ``{"inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [1], "data":
  ["Hello"]}], "parameters": {"max_tokens": 16}}`` (``max_new_tokens`` is accepted too; a BYTES element
  may be ``{"b64": ...}``).

Each token is answered as a ``str`` (one ASCII character; ``""`` for EOS), or for a v2 request as
``{"outputs": [{"name": "text_output", "datatype": "BYTES", "shape": [1], "data": [token]}]}``.
"""

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

BAD_REQUEST = 400
V2_INPUT = "text_input"
V2_OUTPUT = "text_output"
BUDGET_KEYS = ("max_new_tokens", "max_tokens")


class RequestError(ValueError):
    """A request the model cannot take; ``v2`` says which error form to answer with."""

    def __init__(self, message: str, *, v2: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.v2 = v2


@dataclass(frozen=True)
class Request:
    prompt: bytes
    max_new_tokens: int | None  # None: the model's default
    v2: bool = False


def parse(row: Mapping[str, Any]) -> Request:
    """The request in one handler row (``RequestError`` if there is none or it is malformed)."""
    body = row.get("data")
    if body is None:
        body = row.get("body")
    if body is None and "prompt" in row:
        body = row  # form fields (multipart or urlencoded): prompt=...&max_new_tokens=...
    if body is None:
        raise RequestError('no prompt: send it as the request body ("data" or "body")')
    budget = _budget(row.get("max_new_tokens"), v2=False)
    if isinstance(body, (bytes, bytearray, str)):
        structured = _json_object(body)
        if structured is None:
            prompt = body.encode("utf-8") if isinstance(body, str) else bytes(body)
            return Request(prompt, budget)
        body = structured
    if not isinstance(body, Mapping):
        raise RequestError(f"unsupported request body: {type(body).__name__}")
    if "inputs" in body:
        return _v2(body)
    if "prompt" not in body:
        raise RequestError('a JSON request needs "prompt" (and optionally "max_new_tokens")')
    prompt = body["prompt"]
    if isinstance(prompt, str):
        prompt = prompt.encode("utf-8")
    if not isinstance(prompt, (bytes, bytearray)):
        raise RequestError('"prompt" must be a string')
    own = _budget(_first(body, BUDGET_KEYS), v2=False)
    return Request(bytes(prompt), own if own is not None else budget)


def token_response(text: str, v2: bool) -> str | dict[str, Any]:
    """The body answering one generated token."""
    if not v2:
        return text
    return {"outputs": [{"name": V2_OUTPUT, "datatype": "BYTES", "shape": [1], "data": [text]}]}


def error_response(message: str, v2: bool, code: int = BAD_REQUEST) -> dict[str, Any]:
    """The body of a failed request: KServe v2's ``{"error"}``, else TorchServe's error JSON."""
    if v2:
        return {"error": message}
    return {
        "code": code,
        "type": "BadRequest" if code == BAD_REQUEST else "InternalServerError",
        "message": message,
    }


def _json_object(raw: bytes | bytearray | str) -> dict[str, Any] | None:
    text = raw if isinstance(raw, str) else bytes(raw).decode("utf-8", errors="replace")
    if not text.lstrip().startswith("{"):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if isinstance(value, dict) and ("prompt" in value or "inputs" in value):
        return value
    return None


def _first(mapping: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    return next((mapping[key] for key in keys if mapping.get(key) is not None), None)


def _budget(value: Any, *, v2: bool) -> int | None:
    """A max-new-tokens value as sent (int, or the digits as text/bytes); range checks are the model's."""
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            raise RequestError(f"max_new_tokens must be an integer, got {value!r}", v2=v2) from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"max_new_tokens must be an integer, got {value!r}", v2=v2)
    return value


def _v2(body: Mapping[str, Any]) -> Request:
    inputs = body.get("inputs")
    if not isinstance(inputs, list) or not inputs or not all(isinstance(item, Mapping) for item in inputs):
        raise RequestError('"inputs" must be a non-empty list of tensors', v2=True)
    named = [item for item in inputs if item.get("name") == V2_INPUT]
    if named:
        tensor = named[0]
    elif len(inputs) == 1:
        tensor = inputs[0]
    else:
        raise RequestError(f'no "{V2_INPUT}" input among {len(inputs)} inputs', v2=True)
    data = tensor.get("data")
    while isinstance(data, list) and len(data) == 1 and isinstance(data[0], list):
        data = data[0]
    if not isinstance(data, list) or len(data) != 1:
        raise RequestError(f'"{V2_INPUT}" must hold exactly one BYTES element (shape [1])', v2=True)
    prompt = _v2_bytes(data[0])
    parameters = body.get("parameters") or {}
    if not isinstance(parameters, Mapping):
        raise RequestError('"parameters" must be an object', v2=True)
    return Request(prompt, _budget(_first(parameters, BUDGET_KEYS), v2=True), v2=True)


def _v2_bytes(element: Any) -> bytes:
    if isinstance(element, str):
        return element.encode("utf-8")
    if isinstance(element, (bytes, bytearray)):
        return bytes(element)
    if isinstance(element, Mapping) and isinstance(element.get("b64"), str):
        try:
            return base64.b64decode(element["b64"], validate=True)
        except (binascii.Error, ValueError):
            raise RequestError(f'"{V2_INPUT}" holds invalid base64', v2=True) from None
    raise RequestError(f'"{V2_INPUT}" must be a string', v2=True)
