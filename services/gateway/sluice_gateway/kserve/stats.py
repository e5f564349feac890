"""Per model version counters of the KServe v2 inferences this gateway served (ModelStatistics).

In memory and per gateway process: with several gateways each reports its own share. Pure
bookkeeping; the caller measures.
"""

from dataclasses import dataclass, field, replace


@dataclass(frozen=True, slots=True)
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, ns: int) -> "Duration":
        return Duration(self.count + 1, self.ns + max(ns, 0))


@dataclass(frozen=True, slots=True)
class VersionStats:
    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    # From enqueue to the worker starting the job (known when the worker reports it).
    queue: Duration = field(default_factory=Duration)
    # From the worker starting the job to its final reply reaching the gateway.
    compute_infer: Duration = field(default_factory=Duration)
    # Inferences: the batch dimension's size for a batching model, else 1 per request.
    inference_count: int = 0
    execution_count: int = 0
    last_inference_ms: int = 0


@dataclass(frozen=True, slots=True)
class Outcome:
    ok: bool
    duration_ns: int
    finished_unix_ms: int
    batch_size: int = 1
    queue_ns: int | None = None


class InferenceStats:
    def __init__(self) -> None:
        self._by_version: dict[tuple[str, str], VersionStats] = {}

    def record(self, model: str, version: str, outcome: Outcome) -> None:
        stats = self._by_version.get((model, version), VersionStats())
        if not outcome.ok:
            self._by_version[(model, version)] = replace(stats, fail=stats.fail.add(outcome.duration_ns))
            return
        queue, compute = stats.queue, stats.compute_infer
        if outcome.queue_ns is not None:
            queue = queue.add(outcome.queue_ns)
            compute = compute.add(outcome.duration_ns - outcome.queue_ns)
        self._by_version[(model, version)] = replace(
            stats,
            success=stats.success.add(outcome.duration_ns),
            queue=queue,
            compute_infer=compute,
            inference_count=stats.inference_count + max(outcome.batch_size, 1),
            execution_count=stats.execution_count + 1,
            last_inference_ms=max(stats.last_inference_ms, outcome.finished_unix_ms),
        )

    def get(self, model: str, version: str) -> VersionStats:
        return self._by_version.get((model, version), VersionStats())
