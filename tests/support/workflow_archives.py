"""Workflow archives (``.war``) and their member models (``.mar``), made by the real
torch-workflow-archiver and torch-model-archiver: the same store is served by TorchServe 0.12
(``scripts/observe_torchserve_workflows.py`` records its answers in
``tests/e2e/torchserve_observed/workflows.json``) and by Sluice, whose tests compare.

Member models: ``double`` (each value times 2) and ``add_one`` (each value plus 1), computed with
torch on a JSON list of numbers. Function nodes: ``pre`` (the root request's ``{"values": [...]}``
to the JSON text of its list), ``post`` and ``wrap`` (a parent's list to ``{"result": [...]}``),
``join`` (``double`` and ``add_one`` to one object) and ``boom`` (raises). TorchServe calls every
function once with ``data=None`` when it loads the node (its ``initialize``): they return None then
(``boom`` too, else its workflow fails to register). Every node logs what it was given (a
``WORKFLOW-NODE`` line in the model log), which does not change its answers.
"""

import subprocess
import sys
import textwrap
from pathlib import Path

BIN = Path(sys.executable).parent
MODEL_ARCHIVER = BIN / "torch-model-archiver"
WORKFLOW_ARCHIVER = BIN / "torch-workflow-archiver"

DOUBLE = "double"
ADD_ONE = "add_one"
MODELS = (DOUBLE, ADD_ONE)

SEQ = "seq"
FANIN = "fanin"
FANOUT = "fanout"
BROKEN = "broken"
TWO_STARTS = "twostarts"
# Two leaves that answer JSON objects (fanout's leaves answer lists, which TorchServe cannot merge).
FANOUT_OBJECTS = "fanoutobj"
# Archives in the store, in the order they are registered.
WORKFLOWS = (SEQ, FANIN, FANOUT, BROKEN, TWO_STARTS, FANOUT_OBJECTS)
# Sluice's tests only: ``double`` batching up to 8 requests (member batching under concurrent calls),
# and a last node that answers in chunks (``talk``: one chunk per value).
BATCHED = "batched"
STREAMED = "streamed"
# Named by requests, in no store.
MISSING = "missing"
UNKNOWN = "nope"

HANDLER_FILE = "workflow_handler.py"

# The root request of every inference.
VALUES = (1, 2, 3)
BODY = b'{"values": [1, 2, 3]}'

# ``handle(data, context)`` of the member models: ``{op}`` is applied to a float64 tensor.
_MODEL_HANDLER = """
import json
import logging

import torch

logger = logging.getLogger(__name__)


def _values(row):
    raw = row.get("data") or row.get("body")
    if isinstance(raw, (bytes, bytearray)):
        raw = raw.decode("utf-8")
    if isinstance(raw, str):
        raw = json.loads(raw)
    return raw


def _headers(context, idx):
    try:
        return context.request_processor[idx].get_request_properties()
    except Exception as exc:
        return repr(exc)


def handle(data, context):
    if data is None:
        return None
    out = []
    for idx, row in enumerate(data):
        logger.info(
            "WORKFLOW-NODE model=%s data=%r headers=%r", context.model_name, row, _headers(context, idx)
        )
        values = torch.tensor(_values(row), dtype=torch.float64)
        out.append(({op}).tolist())
    return out
"""

DOUBLE_HANDLER = textwrap.dedent(_MODEL_HANDLER).lstrip().replace("{op}", "values * 2")
ADD_ONE_HANDLER = textwrap.dedent(_MODEL_HANDLER).lstrip().replace("{op}", "values + 1")

WORKFLOW_HANDLER = textwrap.dedent("""
    import json
    import logging

    logger = logging.getLogger(__name__)


    def _text(raw):
        if isinstance(raw, (bytes, bytearray)):
            return raw.decode("utf-8")
        return raw


    def _json(raw):
        raw = _text(raw)
        if isinstance(raw, str):
            return json.loads(raw)
        return raw


    def _log(node, data, context):
        for idx, row in enumerate(data or []):
            try:
                headers = context.request_processor[idx].get_request_properties()
            except Exception as exc:
                headers = repr(exc)
            logger.info("WORKFLOW-NODE function=%s data=%r headers=%r", node, row, headers)


    def pre(data, context):
        _log("pre", data, context)
        if data is None:
            return None
        out = []
        for row in data:
            request = _json(row.get("body") or row.get("data"))
            out.append(json.dumps(request["values"]))
        return out


    def post(data, context):
        _log("post", data, context)
        if data is None:
            return None
        return [{"result": _json(row.get("body"))} for row in data]


    def join(data, context):
        _log("join", data, context)
        if data is None:
            return None
        return [{"double": _json(row.get("double")), "add_one": _json(row.get("add_one"))} for row in data]


    def boom(data, context):
        _log("boom", data, context)
        if data is None:
            return None
        raise ValueError("boom")


    def talk(data, context):
        # Answers each value of its parent's list as one chunk, the last as the final answer.
        if data is None:
            return None
        from ts.handler_utils.utils import send_intermediate_predict_response

        values = _json(data[0].get("body"))
        for value in values[:-1]:
            send_intermediate_predict_response(
                [json.dumps(value)], context.request_ids, "Intermediate Prediction success", 200, context
            )
        return [json.dumps(values[-1])]


    def wrap(data, context):
        _log("wrap", data, context)
        if data is None:
            return None
        return [{"result": _json(row.get("body"))} for row in data]
""").lstrip()

# The models section every spec shares (``{members}``: one ``name: {url: name.mar}`` per model).
_MODELS_SECTION = """\
models:
  min-workers: 1
  max-workers: 1
  batch-size: 1
  max-batch-delay: 50
  retry-attempts: 1
  timeout-ms: 10000
{members}"""


def _spec(models: tuple[str, ...], dag: str) -> str:
    members = "".join(f"  {name}:\n    url: {name}.mar\n" for name in models)
    return _MODELS_SECTION.format(members=members) + "\ndag:\n" + textwrap.indent(dag.strip(), "  ") + "\n"


SPECS: dict[str, str] = {
    SEQ: _spec((DOUBLE,), "pre: [double]\ndouble: [post]"),
    FANIN: _spec((DOUBLE, ADD_ONE), "pre: [double, add_one]\ndouble: [join]\nadd_one: [join]"),
    FANOUT: _spec((DOUBLE, ADD_ONE), "pre: [double, add_one]"),
    BROKEN: _spec((), "pre: [boom]"),
    TWO_STARTS: _spec((DOUBLE,), "pre: [double]\npost: [double]"),
    FANOUT_OBJECTS: _spec((DOUBLE, ADD_ONE), "pre: [double, add_one]\ndouble: [post]\nadd_one: [wrap]"),
    STREAMED: _spec((), "pre: [talk]"),
    BATCHED: (
        "models:\n  batch-size: 8\n  max-batch-delay: 300\n  double:\n    url: double.mar\n"
        "dag:\n  pre: [double]\n"
    ),
}


def build_store(store: Path) -> None:
    """``double.mar``, ``add_one.mar`` and one ``<name>.war`` per :data:`WORKFLOWS` in ``store``
    (serve it as both the model store and the workflow store); their sources go beside it."""
    store.mkdir(parents=True, exist_ok=True)
    source = store.parent / "workflow-source"
    source.mkdir(exist_ok=True)
    for name, text in ((DOUBLE, DOUBLE_HANDLER), (ADD_ONE, ADD_ONE_HANDLER)):
        handler = source / f"{name}_handler.py"
        handler.write_text(text)
        _run(
            MODEL_ARCHIVER, "--model-name", name, "--version", "1.0",
            "--handler", str(handler), "--export-path", str(store), "--force",
        )  # fmt: skip
    handler = source / HANDLER_FILE
    handler.write_text(WORKFLOW_HANDLER)
    for name in (*WORKFLOWS, BATCHED, STREAMED):
        spec = source / f"{name}.yaml"
        spec.write_text(SPECS[name])
        _run(
            WORKFLOW_ARCHIVER, "--workflow-name", name, "--spec-file", str(spec),
            "--handler", str(handler), "--export-path", str(store), "--force",
        )  # fmt: skip


def _run(*argv: object) -> None:
    subprocess.run([str(arg) for arg in argv], check=True, capture_output=True)
