"""Serve the workflow archives of tests/support/workflow_archives.py on TorchServe 0.12 (one folder as
its model store and its workflow store), send the workflow API's requests one after another, and
write every answer (status, Content-Type, body) to ``tests/e2e/torchserve_observed/workflows.json``:
the observation Sluice's workflow tests compare with. Its ``notes`` keep what TorchServe logged: the
failure of the ``broken`` workflow, and what each node of each inference was given (the nodes log
their input rows and request headers as ``WORKFLOW-NODE`` lines).

    .venv/bin/python scripts/observe_torchserve_workflows.py [--workdir DIR]
        (builds bench/.torchserve-venv if missing; keeps TorchServe's logs in DIR when given)
"""

import argparse
import base64
import http.client
import json
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.servers.torchserve import TorchServeServer  # noqa: E402
from bench.tools import ensure_torchserve_venv  # noqa: E402
from tests.support import workflow_archives as wa  # noqa: E402

OUT = ROOT / "tests" / "e2e" / "torchserve_observed" / "workflows.json"
TIMEOUT_S = 300.0
# The frontend writes what workers print asynchronously: wait this long before reading the logs.
LOG_SETTLE_S = 1.5
READY_TIMEOUT_S = 300.0
JSON = {"Content-Type": "application/json"}
TEXT = {"Content-Type": "text/plain"}
# A header of no meaning to TorchServe, sent with every inference: do the nodes see it?
TAG = {"X-Observe-Tag": "workflow"}
# "2026-01-01T00:00:00,000 [INFO ] " in front of every log line.
LOG_PREFIX = re.compile(r"^\S+ \[\s*(\w+)\s*\] ")
NODE_LINE = re.compile(r"W-\d+-(\S+?)_1\.0-stdout MODEL_LOG - WORKFLOW-NODE (.*)$")
HOST_PORT = re.compile(r"127\.0\.0\.1:\d+")
UNPACKED = re.compile(r"/tmp/workflows/[0-9a-f]+/")
TRACEBACK_WORDS = ("Traceback", "ValueError", "in boom", "raise ")
# Found by sending each request 40 times to one server (and seen over three runs of this script).
TIMING_DEPENDENT = {
    "predict_fanout": (
        "The message is the compact JSON of the leaf that completed first (Gson's 'Not a JSON "
        "Object: [...]' after the last ':'): [2.0,3.0,4.0] (add_one) or [2.0,4.0,6.0] (double); "
        "25 of 40 said double's, 15 add_one's."
    ),
    "predict_fanoutobj": (
        "Keys in the order the leaves completed: post then wrap 20 of 40 times, wrap then post 20."
    ),
    "node_inputs": (
        "join's parameters (and their headers' per-parameter content types) are in the order its "
        "parents completed; the lines here are sorted."
    ),
}


@dataclass(frozen=True)
class Scenario:
    name: str
    method: str
    port: str  # "inference" or "management"
    path: str
    headers: dict[str, str]
    body: bytes | None = None


def scenarios_before_inference() -> list[Scenario]:
    register = [
        Scenario("register_seq", "POST", "management", "/workflows?url=seq.war", {}),
        Scenario("register_seq_again", "POST", "management", "/workflows?url=seq.war", {}),
        Scenario("register_fanin", "POST", "management", "/workflows?url=fanin.war", {}),
        Scenario("register_fanout", "POST", "management", "/workflows?url=fanout.war", {}),
        Scenario("register_broken", "POST", "management", "/workflows?url=broken.war", {}),
        Scenario("register_twostarts", "POST", "management", "/workflows?url=twostarts.war", {}),
        Scenario("register_missing", "POST", "management", f"/workflows?url={wa.MISSING}.war", {}),
        Scenario("register_no_url", "POST", "management", "/workflows", {}),
    ]
    describe = [
        Scenario("list", "GET", "management", "/workflows", {}),
        Scenario("list_limit_1", "GET", "management", "/workflows?limit=1", {}),
        Scenario("describe_seq", "GET", "management", "/workflows/seq", {}),
        Scenario("describe_nope", "GET", "management", f"/workflows/{wa.UNKNOWN}", {}),
        Scenario("models", "GET", "management", "/models", {}),
    ]
    return register + describe


def inference_scenarios() -> list[Scenario]:
    return [
        Scenario("predict_seq_json", "POST", "inference", "/wfpredict/seq", {**JSON, **TAG}, wa.BODY),
        Scenario("predict_seq_text", "POST", "inference", "/wfpredict/seq", {**TEXT, **TAG}, wa.BODY),
        Scenario("predict_fanin", "POST", "inference", "/wfpredict/fanin", {**JSON, **TAG}, wa.BODY),
        Scenario("predict_fanout", "POST", "inference", "/wfpredict/fanout", {**JSON, **TAG}, wa.BODY),
        Scenario("predict_broken", "POST", "inference", "/wfpredict/broken", {**JSON, **TAG}, wa.BODY),
        Scenario("predict_nope", "POST", "inference", f"/wfpredict/{wa.UNKNOWN}", {**JSON, **TAG}, wa.BODY),
    ]


def scenarios_after_inference() -> list[Scenario]:
    return [
        Scenario("unregister_fanout", "DELETE", "management", "/workflows/fanout", {}),
        Scenario("models_after_unregister", "GET", "management", "/models", {}),
        Scenario("unregister_nope", "DELETE", "management", f"/workflows/{wa.UNKNOWN}", {}),
        Scenario(
            "predict_fanout_after_unregister",
            "POST",
            "inference",
            "/wfpredict/fanout",
            {**JSON, **TAG},
            wa.BODY,
        ),
    ]


def object_leaves_scenarios() -> list[Scenario]:
    """Last, so that they change none of the answers above: two leaves that answer JSON objects."""
    name = wa.FANOUT_OBJECTS
    return [
        Scenario(f"register_{name}", "POST", "management", f"/workflows?url={name}.war", {}),
        Scenario(f"predict_{name}", "POST", "inference", f"/wfpredict/{name}", {**JSON, **TAG}, wa.BODY),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--workdir", type=Path, help="keep TorchServe's store and logs here")
    args = parser.parse_args()
    venv = ensure_torchserve_venv()
    started = time.monotonic()
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
        observed = observe(venv, args.workdir.resolve())
    else:
        with tempfile.TemporaryDirectory() as tmp:
            observed = observe(venv, Path(tmp))
    OUT.write_text(json.dumps(observed, indent=2) + "\n")
    print(f"wrote {OUT} in {time.monotonic() - started:.1f} s")


def observe(venv: Path, work: Path) -> dict[str, Any]:
    store = work / "store"
    wa.build_store(store)
    server = TorchServeServer(venv, work, store, properties={"workflow_store": str(store)})
    server.start([])
    logs = Logs(work / "logs")
    answers: list[dict[str, Any]] = []
    node_inputs: dict[str, list[str]] = {}
    broken: list[str] = []
    try:
        for scenario in scenarios_before_inference():
            answers.append(send(server, scenario))
            if scenario.name == "register_no_url":
                # The members' workers may still be starting: wait (unrecorded) before inferences.
                wait_ready(server)
        for scenario in inference_scenarios():
            mark = logs.mark()
            answers.append(send(server, scenario))
            time.sleep(LOG_SETTLE_S)
            node_inputs[scenario.name] = _node_inputs(logs.since(mark, "model_log.log"))
            if scenario.name == "predict_broken":
                broken = _broken_failure(logs.since(mark, "ts_log.log"))
        for scenario in scenarios_after_inference():
            answers.append(send(server, scenario))
        for scenario in object_leaves_scenarios():
            mark = logs.mark()
            answers.append(send(server, scenario))
            if scenario.method == "POST" and scenario.port == "inference":
                time.sleep(LOG_SETTLE_S)
                node_inputs[scenario.name] = _node_inputs(logs.since(mark, "model_log.log"))
    finally:
        server.stop()
    return {
        "torchserve": "0.12.0",
        "answers": answers,
        "notes": {
            "timing_dependent": TIMING_DEPENDENT,
            "broken_failure_log": broken,
            "node_inputs": node_inputs,
        },
    }


def send(server: TorchServeServer, scenario: Scenario) -> dict[str, Any]:
    port = server.ports.rest if scenario.port == "inference" else server.ports.management
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT_S)
    try:
        connection.request(scenario.method, scenario.path, body=scenario.body, headers=scenario.headers)
        response = connection.getresponse()
        raw = response.read()
        status = response.status
        content_type = response.getheader("Content-Type")
    finally:
        connection.close()
    record: dict[str, Any] = {
        "scenario": scenario.name,
        "method": scenario.method,
        "port": scenario.port,
        "path": scenario.path,
        "request_headers": scenario.headers,
        "request_body": None if scenario.body is None else scenario.body.decode(),
        "status": status,
        "content_type": content_type,
    }
    try:
        record["body"] = raw.decode("utf-8")
    except UnicodeDecodeError:
        record["body"] = base64.b64encode(raw).decode()
        record["body_base64"] = True
    print(f"{scenario.name}: {status} {content_type} {raw[:200]!r}", flush=True)
    return record


def wait_ready(server: TorchServeServer) -> None:
    """Every registered model (the workflows' members and function nodes) has a READY worker."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        names = _model_names(server)
        if names and all(server.ready_workers(name) >= 1 for name in names):
            return
        time.sleep(0.2)
    raise RuntimeError("the workflows' models did not get ready workers")


def _model_names(server: TorchServeServer) -> list[str]:
    connection = http.client.HTTPConnection("127.0.0.1", server.ports.management, timeout=10)
    try:
        connection.request("GET", "/models?limit=100")
        listed = json.loads(connection.getresponse().read())
    finally:
        connection.close()
    return [model["modelName"] for model in listed.get("models", [])]


def _node_inputs(lines: list[str]) -> list[str]:
    """``<model>: function=<name> data=... headers=...`` of each WORKFLOW-NODE line (the client's
    port in its Host header as <port>)."""
    out = []
    for line in lines:
        found = NODE_LINE.search(line)
        if found is not None:
            out.append(f"{found.group(1)}: {HOST_PORT.sub('127.0.0.1:<port>', found.group(2))}")
    return sorted(out)


def _broken_failure(lines: list[str]) -> list[str]:
    """The frontend's DagExecutor lines and the handler's traceback, once each (log4j writes every
    ts_log line twice), the unpacked archive's random folder as <id>."""
    out: list[str] = []
    for line in lines:
        kept = "DagExecutor" in line or (
            "broken__boom" in line and "MODEL_LOG" in line and any(w in line for w in TRACEBACK_WORDS)
        )
        line = UNPACKED.sub("/tmp/workflows/<id>/", line)
        if kept and line not in out:
            out.append(line)
    return out


def _level(match: re.Match[str]) -> str:
    return f"[{match.group(1)}] "


class Logs:
    """The lines TorchServe appends to its ts_log.log and model_log.log, without their time stamps."""

    FILES = ("ts_log.log", "model_log.log")

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def mark(self) -> dict[str, int]:
        return {name: self._size(name) for name in self.FILES}

    def since(self, mark: dict[str, int], name: str) -> list[str]:
        path = self.folder / name
        if not path.exists():
            return []
        with path.open("rb") as log:
            log.seek(mark[name])
            text = log.read().decode("utf-8", "replace")
        return [LOG_PREFIX.sub(_level, line) for line in text.splitlines() if line]

    def _size(self, name: str) -> int:
        path = self.folder / name
        return path.stat().st_size if path.exists() else 0


if __name__ == "__main__":
    main()
