"""An in-memory :class:`~sluice_worker.broker.source.JobSource` and a stand-in handler service, so
that the unit tier drives ``Worker.serve`` without Redis or torch models (beside the real-Redis
integration tests of the worker, never instead of them)."""

import asyncio
import itertools
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import Any, Protocol

from sluice.envelope import Job, Reply, WireProtocol
from sluice.v1.torchserve_inference_pb2 import PredictionResponse, PredictionsRequest
from sluice_worker.broker.source import BrokerUnavailable
from sluice_worker.delivery import Delivery
from sluice_worker.exit_codes import ExitCode
from sluice_worker.protocols import TsRequest
from sluice_worker.replies import Outgoing
from sluice_worker.sequence_state import NO_STATES, StateUpdate
from ts.protocol.otf_message_handler import create_predict_response

_receipts = itertools.count(1)


def job(
    data: bytes = b"x", *, job_id: str = "", deadline_ms: int = 0, age_ms: int = 0, **headers: str
) -> Job:
    """A TorchServe gRPC job with one input ``data``, enqueued ``age_ms`` ago."""
    now_ms = int(time.time() * 1000)
    made = Job(
        job_id=job_id or f"job-{next(_receipts)}",
        protocol=WireProtocol.TORCHSERVE_GRPC,
        model_name="m",
        model_version="1.0",
        reply_to="replies",
        request=PredictionsRequest(model_name="m", input={"data": data}).SerializeToString(),
        enqueued_unix_ms=now_ms - age_ms,
        deadline_unix_ms=deadline_ms,
    )
    return made


def delivery(made: Job, attempt: int = 1) -> Delivery:
    return Delivery(receipt=f"r{next(_receipts)}".encode(), job=made, attempt=attempt)


def prediction(reply: Reply) -> bytes:
    return PredictionResponse.FromString(reply.payload).prediction


@dataclass
class Finished:
    outgoing: list[Outgoing]
    done: list[Delivery]
    batch_size: int
    states: dict[str, StateUpdate] = field(default_factory=dict)


@dataclass
class InMemoryJobSource:
    waiting: deque[Delivery] = field(default_factory=deque)
    rescued: list[Delivery] = field(default_factory=list)
    cancelled_jobs: set[str] = field(default_factory=set)
    finished: list[Finished] = field(default_factory=list)
    published: list[Outgoing] = field(default_factory=list)
    # The next N reads / finishes fail as if the broker were down.
    failing_reads: int = 0
    failing_finishes: int = 0
    reads: int = 0
    left: bool = False
    _arrived: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, *jobs: Job) -> list[Delivery]:
        added = [delivery(made) for made in jobs]
        self.waiting.extend(added)
        self._arrived.set()
        return added

    @property
    def replies(self) -> list[Reply]:
        return [item.reply for batch in self.finished for item in batch.outgoing]

    def reply_of(self, job_id: str) -> Reply:
        [reply] = [reply for reply in self.replies if reply.job_id == job_id and reply.final]
        return reply

    @property
    def acked(self) -> list[bytes]:
        return [d.receipt for batch in self.finished for d in batch.done]

    async def read(self, count: int, block_ms: int | None) -> list[Delivery]:
        self.reads += 1
        if self.failing_reads:
            self.failing_reads -= 1
            raise BrokerUnavailable("down (test)")
        if not self.waiting and block_ms:
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), block_ms / 1000)
            except TimeoutError:
                return []
        taken: list[Delivery] = []
        while self.waiting and len(taken) < count:
            taken.append(self.waiting.popleft())
        return taken

    async def rescue(self, held: Set[bytes]) -> list[Delivery]:
        rescued, self.rescued = self.rescued, []
        return rescued

    async def cancelled(self, deliveries: Sequence[Delivery]) -> list[bool]:
        return [d.job_id in self.cancelled_jobs for d in deliveries]

    async def publish(self, outgoing: Sequence[Outgoing]) -> None:
        self.published.extend(outgoing)

    def finish(
        self,
        outgoing: Sequence[Outgoing],
        done: Sequence[Delivery],
        *,
        batch_size: int = 0,
        states: Mapping[str, StateUpdate] = NO_STATES,
    ) -> Awaitable[None]:
        if self.failing_finishes:
            self.failing_finishes -= 1
            return self._fail()
        self.finished.append(Finished(list(outgoing), list(done), batch_size, dict(states)))
        return self._done()

    async def _done(self) -> None:
        return None

    async def _fail(self) -> None:
        raise BrokerUnavailable("lost (test)")

    async def leave(self) -> None:
        self.left = True


Behaviour = Callable[[list[bytes], Any], list[Any]]


def _data(request: TsRequest) -> bytes:
    return bytes(next(p["value"] for p in request["parameters"] if p["name"] == "data"))


class FakeService:
    """A handler service (sluice_worker.runtime.HandlerService) that runs ``behaviour`` on the rows'
    ``data`` inputs and frames the results as TorchServe does; it records each batch it ran."""

    def __init__(self, behaviour: Behaviour | None = None) -> None:
        self.behaviour = behaviour or (lambda rows, context: [row.upper() for row in rows])
        self.batches: list[list[bytes]] = []
        self.cl_socket: Any = None
        self._ids: dict[int, str] = {}

    def set_cl_socket(self, cl_socket: Any) -> None:
        self.cl_socket = cl_socket

    def predict(self, batch: list[TsRequest]) -> bytes:
        rows = [
            bytes(next(p["value"] for p in request["parameters"] if p["name"] == "data")) for request in batch
        ]
        self.batches.append(rows)
        ids = self._ids = {index: request["requestId"].decode() for index, request in enumerate(batch)}
        try:
            results = self.behaviour(rows, self)
        except Exception as exc:  # as TorchServe answers a handler that raises
            return bytes(create_predict_response(None, ids, f"Prediction failed: {exc}", 503))
        return bytes(create_predict_response(results, ids, "Prediction success", 200))

    def intermediate(self, results: list[Any]) -> None:
        """What ``send_intermediate_predict_response`` does (call it from inside ``behaviour``)."""
        frame = create_predict_response(results, self._ids, "Prediction success", 200, None, True)
        self.cl_socket.sendall(frame)


class Loop(Protocol):
    async def serve(self) -> ExitCode: ...


async def serve_until(
    loop: Loop, stopping: asyncio.Event, done: Callable[[], bool], timeout_s: float = 10.0
) -> ExitCode:
    """Serve until ``done()`` holds, then stop (SIGTERM) and return the exit code."""
    task = asyncio.create_task(loop.serve())
    deadline = time.monotonic() + timeout_s
    while not done() and not task.done():
        assert time.monotonic() < deadline, "the loop did not get there in time"
        await asyncio.sleep(0.002)
    stopping.set()
    return await asyncio.wait_for(task, timeout_s)


def stream(source: InMemoryJobSource, job_id: str) -> list[Reply]:
    """Every reply sent for ``job_id``, in order."""
    return [reply for reply in source.replies if reply.job_id == job_id]
