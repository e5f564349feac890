"""TorchServe's JSON text (Gson's pretty print), without the HTTP stack: a gRPC-only path may need it."""

import json
from typing import Any


def pretty_json(value: Any) -> bytes:
    """Gson's pretty print as TorchServe sends it: 2-space indent, then a newline."""
    return (json.dumps(value, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
