"""The clients of the workflow benchmark (``bench/workflows.py``): closed-loop aiohttp REST calls, each
answer checked against the pipeline's answer computed in-process.

Forms of one call:

- ``workflow``: ``POST /wfpredict/pipe`` with the request (``application/json``);
- ``kserve``: ``POST /v2/models/pipe/infer`` with one BYTES input ``INPUT0`` holding the request's JSON
  text (the answer's ``OUTPUT0`` holds the workflow's);
- ``chain``: the client calls ``/predictions/pre`` (the request), ``/predictions/cnn`` (pre's answer,
  ``application/octet-stream``) and ``/predictions/post`` (cnn's answer) one after another; the time
  of each hop is kept.
"""

import itertools
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from bench.loadgen import HttpStatusError, LoadResult, closed_loop
from bench.stats import latency_summary_ms
from bench.workflow_store import CNN, POST, PRE, WORKFLOW, Request

CALL_TIMEOUT_S = 30.0
# Per measured window: far more than 32 clients answer in the longest window.
MAX_REQUESTS = 500_000
JSON_TYPE = "application/json"
RAW_TYPE = "application/octet-stream"
# A call at least this long is counted as stalled (TorchServe's workflow loses a node's answer now and
# then and waits the node's timeout-ms, 10 s, before it retries).
STALL_S = 1.0
# The score is rounded to 6 digits; a batch's float rounding may move it by one unit.
SCORE_TOLERANCE = 2e-6
FORMS = ("workflow", "kserve", "chain")
HOPS = (PRE, CNN, POST)


class WrongAnswer(Exception):
    """An answer that is not the pipeline's for the request."""


def check(answer: bytes, expected: Request) -> None:
    try:
        got = json.loads(answer)
        right = (
            got["class"] == expected.expected_class
            and abs(float(got["score"]) - expected.expected_score) <= SCORE_TOLERANCE
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise WrongAnswer(answer[:200].decode(errors="replace")) from exc
    if not right:
        raise WrongAnswer(answer[:200].decode(errors="replace"))


def kserve_body(request: bytes) -> bytes:
    return json.dumps(
        {"inputs": [{"name": "INPUT0", "datatype": "BYTES", "shape": [1], "data": [request.decode()]}]}
    ).encode()


def kserve_answer(answer: bytes) -> bytes:
    try:
        text: str = json.loads(answer)["outputs"][0]["data"][0]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise WrongAnswer(answer[:200].decode(errors="replace")) from exc
    return text.encode()


@dataclass
class Measured:
    """One window: the load result; the latency of every successful call that started in the window,
    however long after the window it ended (``LoadResult.latencies_ns`` drops calls that end after
    it: a 10 s stall near the end of a window would not show); the calls of the whole load (warm-up
    and tail too) that took ``STALL_S`` or more; and (chain) the hops' latencies of the measured calls."""

    result: LoadResult
    started_ns: list[int] = field(default_factory=list)
    stalls_s: list[float] = field(default_factory=list)
    hops_ns: dict[str, list[int]] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "concurrency": self.result.concurrency,
            "duration_s": self.result.duration_s,
            "requests": self.result.requests,
            "completed": self.result.completed,
            "throughput_rps": self.result.throughput_rps,
            "latency_ms": latency_summary_ms(self.started_ns),
            "latency_ended_in_window_ms": latency_summary_ms(self.result.latencies_ns),
            "errors": dict(self.result.errors),
            "stalls_s": [round(value, 3) for value in self.stalls_s],
        }
        if self.hops_ns:
            out["hops_ms"] = {hop: latency_summary_ms(values) for hop, values in self.hops_ns.items()}
        return out


class Calls:
    """The three forms of one call on one aiohttp session; a chain's hops are returned with its answer."""

    def __init__(self, session: Any, base_url: str, request: Request) -> None:
        self._session = session
        self._base_url = base_url
        self._request = request
        self._kserve_body = kserve_body(request.body)

    async def _post(self, path: str, body: bytes, content_type: str) -> bytes:
        async with self._session.post(
            f"{self._base_url}{path}", data=body, headers={"content-type": content_type}
        ) as response:
            answer: bytes = await response.read()
            if response.status != 200:
                raise HttpStatusError(response.status)
            return answer

    async def workflow(self) -> None:
        check(await self._post(f"/wfpredict/{WORKFLOW}", self._request.body, JSON_TYPE), self._request)

    async def kserve(self) -> None:
        answer = await self._post(f"/v2/models/{WORKFLOW}/infer", self._kserve_body, JSON_TYPE)
        check(kserve_answer(answer), self._request)

    async def chain(self) -> list[int]:
        """The three hops' nanoseconds."""
        times = [time.perf_counter_ns()]
        tensor = await self._post(f"/predictions/{PRE}", self._request.body, JSON_TYPE)
        times.append(time.perf_counter_ns())
        logits = await self._post(f"/predictions/{CNN}", tensor, RAW_TYPE)
        times.append(time.perf_counter_ns())
        answer = await self._post(f"/predictions/{POST}", logits, RAW_TYPE)
        times.append(time.perf_counter_ns())
        check(answer, self._request)
        return [end - start for start, end in itertools.pairwise(times)]

    def of(self, form: str) -> Callable[[], Awaitable[Any]]:
        if form not in FORMS:
            raise ValueError(f"unknown form {form!r}")
        picked: Callable[[], Awaitable[Any]] = getattr(self, form)
        return picked


async def run_load(
    form: str,
    base_url: str,
    request: Request,
    *,
    concurrency: int,
    duration_s: float,
    warmup_s: float,
) -> Measured:
    """``concurrency`` closed-loop clients of ``form`` against the server at ``base_url``."""
    import aiohttp

    connector = aiohttp.TCPConnector(limit=concurrency, force_close=False)
    timeout = aiohttp.ClientTimeout(total=CALL_TIMEOUT_S)
    measured = Measured(LoadResult(concurrency, duration_s))
    if form == "chain":
        measured.hops_ns = {hop: [] for hop in HOPS}
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        call = Calls(session, base_url, request).of(form)
        window_start = time.perf_counter_ns() + int(warmup_s * 1e9)
        window_end = window_start + int(duration_s * 1e9)

        async def timed() -> Any:
            sent = time.perf_counter_ns()
            answer = await call()
            elapsed = time.perf_counter_ns() - sent
            if window_start <= sent < window_end:
                measured.started_ns.append(elapsed)
            if elapsed >= STALL_S * 1e9:
                measured.stalls_s.append(elapsed / 1e9)
            return answer

        def keep_hops(answer: Any, result: LoadResult, in_window: bool) -> None:
            if in_window and measured.hops_ns:
                for hop, elapsed in zip(HOPS, answer, strict=True):
                    measured.hops_ns[hop].append(elapsed)

        measured.result = await closed_loop(
            timed,
            concurrency=concurrency,
            duration_s=duration_s,
            warmup_s=warmup_s,
            max_requests=MAX_REQUESTS,
            call_timeout_s=CALL_TIMEOUT_S,
            on_result=keep_hops,
        )
    return measured
