"""Validation of model names and versions before they touch a key, a path or a log line."""

import re

from sluice.errors import ErrorCode, SluiceError

# TorchServe's model-name rule; versions follow the same alphabet (e.g. "1.0", "2024-01-v3").
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-.]*")
MAX_NAME_LENGTH = 128


def is_valid(name: str) -> bool:
    return len(name) <= MAX_NAME_LENGTH and _NAME.fullmatch(name) is not None


def check_model_name(name: str) -> str:
    if not is_valid(name):
        raise SluiceError(ErrorCode.MODEL_NOT_FOUND, f"Model not found: {printable(name)}")
    return name


def printable(text: str) -> str:
    """``text`` safe for a message: printable characters only, bounded."""
    cleaned = "".join(ch if ch.isprintable() else "?" for ch in text[:MAX_NAME_LENGTH])
    return cleaned + ("..." if len(text) > MAX_NAME_LENGTH else "")


def check_version(model: str, version: str) -> str:
    if not is_valid(version):
        raise SluiceError(
            ErrorCode.VERSION_NOT_FOUND,
            f"Model version: {printable(version)} does not exist for model: {printable(model)}",
        )
    return version


MAX_SEQUENCE_ID_LENGTH = 256


def check_sequence_id(sequence_id: str) -> str:
    """A client's sequence id: it becomes part of Redis keys and log lines."""
    if not sequence_id or len(sequence_id) > MAX_SEQUENCE_ID_LENGTH or not sequence_id.isprintable():
        raise SluiceError(ErrorCode.INVALID_ARGUMENT, f"Invalid sequence id: {printable(sequence_id)}")
    return sequence_id
