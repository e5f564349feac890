"""What a workflow call answers, as TorchServe's ``WorkflowManager.predict`` builds it: a single leaf's
output as it is; several leaves' outputs as one JSON object keyed by leaf name, in the order the leaves
answered, each output parsed as a JSON object (pretty-printed by Gson, as TorchServe's JSON answers)."""

import json
from typing import Any

from sluice.errors import ErrorCode, SluiceError
from sluice.transport.json_text import pretty_json


def combined(leaves: list[tuple[str, bytes]]) -> bytes:
    if len(leaves) == 1:
        return leaves[0][1]
    return pretty_json({name: _json_object(name, output) for name, output in leaves})


def _json_object(leaf: str, output: bytes) -> dict[str, Any]:
    try:
        value = json.loads(output)
    except (ValueError, RecursionError):
        value = None
    if not isinstance(value, dict):
        # TorchServe fails the call too (Gson's getAsJsonObject), with a message that says less.
        raise SluiceError(
            ErrorCode.INTERNAL,
            f"Workflow leaf {leaf} did not answer a JSON object: a workflow with several leaves answers "
            "one JSON object made of theirs",
        )
    return value
