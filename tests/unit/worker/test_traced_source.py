"""The worker's spans of a traced job (tracing on): recorded when the job is finished, under the
gateway's span, with its queue wait, batch formation and handler run; untraced jobs cost nothing."""

from dataclasses import dataclass, field
from typing import Any, cast

from sluice.envelope import Reply
from sluice.tracing.otel import Tracing
from sluice_worker.replies import Outgoing
from sluice_worker.traced_source import MS, TracedSource

from tests.unit.worker.in_memory_source import InMemoryJobSource, job

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@dataclass
class RecordedSpans:
    """Stands in for :class:`Tracing`: what would be exported."""

    spans: list[dict[str, Any]] = field(default_factory=list)

    def record(self, *args: Any) -> None:
        names = ("traceparent", "tracestate", "name", "start_ns", "end_ns", "children", "attributes", "error")
        self.spans.append(dict(zip(names, args, strict=True)))


class Clock:
    def __init__(self, *times_ns: int) -> None:
        self._times = list(times_ns)

    def __call__(self) -> int:
        return self._times.pop(0)


def traced_source(recorded: RecordedSpans, clock: Clock) -> tuple[InMemoryJobSource, TracedSource]:
    inner = InMemoryJobSource()
    return inner, TracedSource(inner, cast(Tracing, recorded), "9000", clock_ns=clock)


def final(job_id: str, started_unix_ms: int, **fields: Any) -> Outgoing:
    return Outgoing("replies", Reply(job_id=job_id, final=True, started_unix_ms=started_unix_ms, **fields))


async def test_a_traced_job_gets_its_span_and_three_phases() -> None:
    recorded = RecordedSpans()
    read_ns, done_ns = 1_000_010 * MS, 1_000_050 * MS
    inner, source = traced_source(recorded, Clock(read_ns, done_ns))
    traced = job(job_id="t")
    traced.enqueued_unix_ms, traced.traceparent, traced.tracestate = 1_000_000, TRACEPARENT, "k=v"
    [delivery] = inner.add(traced)
    assert await source.read(8, None) == [delivery]
    await source.finish([final("t", 1_000_030, status_code=200)], [delivery], batch_size=1)
    [span] = recorded.spans
    assert (span["traceparent"], span["tracestate"], span["name"]) == (
        TRACEPARENT,
        "k=v",
        "sluice.worker.job",
    )
    assert (span["start_ns"], span["end_ns"]) == (1_000_000 * MS, done_ns)
    assert span["children"] == [
        ("queue wait", 1_000_000 * MS, read_ns),
        ("batch formation", read_ns, 1_000_030 * MS),
        ("handler", 1_000_030 * MS, done_ns),
    ]
    assert span["attributes"]["sluice.request_id"] == "t"
    assert span["attributes"]["sluice.status_code"] == 200
    assert span["error"] == ""
    assert inner.finished[0].done == [delivery]


async def test_a_job_that_never_reached_the_handler_has_its_wait_only_and_its_error() -> None:
    recorded = RecordedSpans()
    inner, source = traced_source(recorded, Clock(5_000 * MS, 5_001 * MS))
    traced = job(job_id="late")
    traced.enqueued_unix_ms, traced.traceparent = 4_000, TRACEPARENT
    [delivery] = inner.add(traced)
    await source.read(8, None)
    await source.finish(
        [final("late", 0, status_code=504, error_code="DEADLINE_EXCEEDED", message="late")], [delivery]
    )
    [span] = recorded.spans
    assert span["children"] == [("queue wait", 4_000 * MS, 5_000 * MS)]
    assert span["error"] == "late"


async def test_untraced_jobs_record_nothing() -> None:
    recorded = RecordedSpans()
    inner, source = traced_source(recorded, Clock(1, 2, 3))
    [delivery] = inner.add(job(job_id="plain"))
    await source.read(8, None)
    await source.finish([final("plain", 1)], [delivery])
    assert recorded.spans == []
    assert inner.finished[0].done == [delivery]
