"""Stream metrics, kept per gateway process and fed by the data plane for every call that streams
(:meth:`sluice_gateway.dataplane.JobObserver.streamed`), whatever its transport:

- ``sluice_time_to_first_token_microseconds`` (histogram): from the job's admission to its first chunk.
- ``sluice_inter_token_latency_microseconds`` (histogram): the gap between consecutive chunks of one call.
- ``sluice_stream_tokens_total`` (counter): chunks streamed.

A call streams once a reply with a payload comes before its final reply; every reply with a payload
is then a chunk (one token for a generative handler that sends a token per iteration; a handler may
send several in one chunk). A call answered by its final reply alone is not counted here. Labels are
those of the ``ts_inference_*`` counters: ``model_name``, ``model_version`` (the version the client
named, ``"default"`` when none) and ``hostname``. Chunks are timed as the gateway hands them to the
transport, so the time includes the reply path (worker -> Redis -> gateway), not the client's network.
"""

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Sequence

from sluice_gateway.metrics.exposition import MetricFamily, Sample, bucket_samples

# Microseconds: 0.5 ms to 60 s.
LATENCY_BOUNDS_US: tuple[float, ...] = (
    500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000, 30_000_000, 60_000_000,
)  # fmt: skip

TIME_TO_FIRST_TOKEN = "sluice_time_to_first_token_microseconds"
INTER_TOKEN_LATENCY = "sluice_inter_token_latency_microseconds"
TOKENS = "sluice_stream_tokens_total"

_HELP = "Sluice histogram metric with unit:"

# (model_name, model_version label)
Key = tuple[str, str]


class Histogram:
    """Observations counted per bucket of ``bounds`` (plus one above the last), and their sum."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: Sequence[float] = LATENCY_BOUNDS_US) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def samples(self, name: str, labels: Sequence[tuple[str, str]]) -> list[Sample]:
        return bucket_samples(name, labels, self.bounds, self.counts, self.total)


class StreamMetrics:
    def __init__(self) -> None:
        self._first = defaultdict[Key, Histogram](Histogram)
        self._gaps = defaultdict[Key, Histogram](Histogram)
        self._tokens = defaultdict[Key, int](int)

    def chunk(self, key: Key, wait_ns: int, first: bool) -> None:
        (self._first if first else self._gaps)[key].observe(wait_ns / 1000.0)
        self._tokens[key] += 1

    def families(self, hostname: str) -> list[MetricFamily]:
        def labels(key: Key) -> list[tuple[str, str]]:
            return [("model_name", key[0]), ("model_version", key[1]), ("hostname", hostname)]

        def histogram(name: str, what: str, values: dict[Key, Histogram]) -> MetricFamily:
            samples = [s for key, h in sorted(values.items()) for s in h.samples(name, labels(key))]
            return MetricFamily(name, "histogram", f"{_HELP} Microseconds ({what})", samples)

        tokens = [Sample(TOKENS, labels(key), count) for key, count in sorted(self._tokens.items())]
        return [
            histogram(TIME_TO_FIRST_TOKEN, "admission to the first chunk of a streamed call", self._first),
            histogram(INTER_TOKEN_LATENCY, "between consecutive chunks of a streamed call", self._gaps),
            MetricFamily(
                TOKENS, "counter", "Sluice counter metric with unit: Count (chunks streamed)", tokens
            ),
        ]
