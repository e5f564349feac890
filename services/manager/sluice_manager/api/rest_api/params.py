"""TorchServe's REST parameters and their defaults (``NettyUtils``, ``RegisterModelRequest``):

- integers: a missing or unparsable value takes the default (``getIntParameter``); the first of
  repeated values counts;
- booleans: ``Boolean.parseBoolean`` (only a case-insensitive "true" is true);
- ``POST /models``: with ``Content-Type: application/json`` the JSON body alone counts (same snake_case
  keys), otherwise the query string alone; ``synchronous`` defaults to true over REST.
"""

import json
from collections.abc import Mapping
from typing import Any

from sluice.errors import ErrorCode, SluiceError

from sluice_manager.api.management_calls import RegisterRequest, ScaleRequest

INT_MAX = 2**31 - 1


def text(query: Mapping[str, str], key: str) -> str | None:
    value = query.get(key)
    return value if value else None


def integer(query: Mapping[str, str], key: str, default: int) -> int:
    value = query.get(key)
    if value is None:
        return default
    try:
        parsed = int(value.strip(), 10)
    except ValueError:
        return default
    return parsed if -INT_MAX - 1 <= parsed <= INT_MAX else default


def boolean(query: Mapping[str, str], key: str, default: bool) -> bool:
    value = query.get(key)
    return default if value is None else value.strip().lower() == "true"


def scale_from_query(model: str, version: str | None, query: Mapping[str, str]) -> ScaleRequest:
    """``PUT /models/{m}[/{v}]``: ``min_worker`` defaults to 1, ``max_worker`` to ``min_worker``,
    ``synchronous`` to false; ``timeout`` (seconds) 0 stops the workers at once, -1 (or absent) is the
    manager's default stop timeout; ``number_gpu`` defaults to 0."""
    low = integer(query, "min_worker", 1)
    timeout = integer(query, "timeout", -1)
    return ScaleRequest(
        model_name=model,
        version=version or text(query, "model_version"),
        min_workers=low,
        max_workers=integer(query, "max_worker", low),
        synchronous=boolean(query, "synchronous", False),
        stop_timeout_s=None if timeout == -1 else timeout,
        number_gpu=integer(query, "number_gpu", 0),
    )


def _unset_if_not_positive(value: int | None) -> int | None:
    return value if value is not None and value > 0 else None


def register_from_query(query: Mapping[str, str]) -> RegisterRequest:
    return _register(
        url=text(query, "url"),
        model_name=text(query, "model_name"),
        handler=text(query, "handler"),
        runtime=text(query, "runtime"),
        batch_size=integer(query, "batch_size", -1),
        max_batch_delay=integer(query, "max_batch_delay", -1),
        initial_workers=integer(query, "initial_workers", -1),
        synchronous=boolean(query, "synchronous", True),
        response_timeout=integer(query, "response_timeout", -1),
        startup_timeout=integer(query, "startup_timeout", -1),
    )


def register_from_json(body: bytes) -> RegisterRequest:
    try:
        data = json.loads(body) if body.strip() else {}
    except ValueError:
        raise SluiceError(ErrorCode.INVALID_ARGUMENT, "Invalid JSON in the request body") from None
    if not isinstance(data, dict):
        raise SluiceError(ErrorCode.INVALID_ARGUMENT, "The request body must be a JSON object")
    return _register(
        url=_json_text(data, "url"),
        model_name=_json_text(data, "model_name"),
        handler=_json_text(data, "handler"),
        runtime=_json_text(data, "runtime"),
        batch_size=_json_int(data, "batch_size"),
        max_batch_delay=_json_int(data, "max_batch_delay"),
        initial_workers=_json_int(data, "initial_workers"),
        synchronous=_json_bool(data, "synchronous", True),
        response_timeout=_json_int(data, "response_timeout"),
        startup_timeout=_json_int(data, "startup_timeout"),
    )


def _register(
    *,
    url: str | None,
    model_name: str | None,
    handler: str | None,
    runtime: str | None,
    batch_size: int,
    max_batch_delay: int,
    initial_workers: int,
    synchronous: bool,
    response_timeout: int,
    startup_timeout: int,
) -> RegisterRequest:
    """Values <= 0 mean "unset" (the archive's or the server's default), as TorchServe treats them;
    ``initial_workers`` given as 0 (or less) means no worker."""
    return RegisterRequest(
        url=url or "",
        model_name=model_name,
        handler=handler,
        runtime=runtime,
        batch_size=_unset_if_not_positive(batch_size),
        max_batch_delay_ms=max_batch_delay if max_batch_delay >= 0 else None,
        initial_workers=None if initial_workers == -1 else max(initial_workers, 0),
        synchronous=synchronous,
        response_timeout_s=_unset_if_not_positive(response_timeout),
        startup_timeout_s=_unset_if_not_positive(startup_timeout),
    )


def _json_text(data: dict[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise SluiceError(ErrorCode.INVALID_ARGUMENT, f"Invalid value for {key}: expected a string")
    return value or None


def _json_int(data: dict[str, Any], key: str) -> int:
    value = data.get(key)
    if value is None:
        return -1
    if isinstance(value, bool):
        raise SluiceError(ErrorCode.INVALID_ARGUMENT, f"Invalid value for {key}: expected an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip(), 10)
        except ValueError:
            pass
    raise SluiceError(ErrorCode.INVALID_ARGUMENT, f"Invalid value for {key}: expected an integer")


def _json_bool(data: dict[str, Any], key: str, default: bool) -> bool:
    value = data.get(key)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return value.strip().lower() == "true"
    raise SluiceError(ErrorCode.INVALID_ARGUMENT, f"Invalid value for {key}: expected a boolean")
