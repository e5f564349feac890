"""TorchServe's frontend counters, kept per gateway process and fed by the data plane
(:class:`sluice_gateway.dataplane.JobObserver`), so gRPC and REST calls count alike.

- ``ts_inference_requests_total``: every request for a model that exists, queued or refused by the
  queue (TorchServe counts after the model lookup, before the queue).
- ``ts_inference_latency_microseconds``: admission to the final successful reply.
- ``ts_queue_latency_microseconds``: admission to the moment a worker started the job.
- ``sluice_cold_start_requests_total`` and ``sluice_cold_start_wait_microseconds``: requests admitted
  while their version ran no worker (it scales from zero), and their time until a worker started
  them: the cost of a cold start as clients see it.
- ``Requests2XX``, ``Requests4XX``, ``Requests5XX`` (``Level="Host"``, ``Hostname``): responses of
  this gateway's HTTP ports by status, counted as TorchServe's frontend counts its HTTP responses
  (every status outside 2xx and 4xx is a 5XX; gRPC calls are not counted, as in TorchServe).
- ``QueueTime`` (gauge, ``Level="Host"``, ``Hostname``): milliseconds the last successful job
  waited between admission and a worker starting it.

``model_version`` is the version the client named, ``"default"`` when it named none. Calls that
stream are also timed chunk by chunk (:mod:`.streams`).
"""

import socket
import time
from collections import defaultdict
from typing import TYPE_CHECKING

from sluice_gateway.inflight import PendingJob
from sluice_gateway.metrics.exposition import MetricFamily, Sample
from sluice_gateway.metrics.streams import StreamMetrics

if TYPE_CHECKING:  # aiohttp loads after gRPC serves (see app.Gateway._start_http)
    from aiohttp import web

DEFAULT_VERSION_LABEL = "default"

_FAMILIES = (
    ("ts_inference_requests_total", "Count"),
    ("ts_inference_latency_microseconds", "Microseconds"),
    ("ts_queue_latency_microseconds", "Microseconds"),
    ("sluice_cold_start_requests_total", "Count"),
    ("sluice_cold_start_wait_microseconds", "Microseconds"),
)


def _help(name: str, unit: str) -> str:
    owner = "Sluice" if name.startswith("sluice_") else "Torchserve prometheus"
    return f"{owner} counter metric with unit: {unit}"


_RESPONSE_CLASSES = ("Requests2XX", "Requests4XX", "Requests5XX")


def _response_class(status: int) -> str:
    if 200 <= status < 300:
        return "Requests2XX"
    return "Requests4XX" if 400 <= status < 500 else "Requests5XX"


class InferenceMetrics:
    def __init__(self, hostname: str | None = None) -> None:
        self.hostname = hostname or socket.gethostname()
        self._values: dict[str, defaultdict[tuple[str, str], float]] = {
            name: defaultdict(float) for name, _unit in _FAMILIES
        }
        self.streams = StreamMetrics()
        self._responses: dict[str, int] = {}
        self._queue_time_ms: float | None = None

    def responded(self, status: int) -> None:
        """One HTTP response of this gateway (any port) with ``status``."""
        name = _response_class(status)
        self._responses[name] = self._responses.get(name, 0) + 1

    async def on_response_prepare(self, _request: "web.Request", response: "web.StreamResponse") -> None:
        """aiohttp's ``on_response_prepare`` signal: count every response an app sends."""
        self.responded(response.status)

    def admitted(self, model: str, requested_version: str) -> None:
        self._values["ts_inference_requests_total"][(model, requested_version or DEFAULT_VERSION_LABEL)] += 1

    def streamed(self, job: PendingJob, wait_ns: int, first: bool) -> None:
        self.streams.chunk((job.model, job.requested_version or DEFAULT_VERSION_LABEL), wait_ns, first)

    def finished(self, job: PendingJob) -> None:
        if not job.succeeded:
            return
        key = (job.model, job.requested_version or DEFAULT_VERSION_LABEL)
        latency_us = (time.monotonic_ns() - job.created_ns) / 1000.0
        self._values["ts_inference_latency_microseconds"][key] += latency_us
        if job.started_unix_ms and job.enqueued_unix_ms:
            queued_us = max(job.started_unix_ms - job.enqueued_unix_ms, 0) * 1000.0
            self._values["ts_queue_latency_microseconds"][key] += queued_us
            self._queue_time_ms = queued_us / 1000.0
            if job.cold:
                self._values["sluice_cold_start_requests_total"][key] += 1
                self._values["sluice_cold_start_wait_microseconds"][key] += queued_us

    def families(self) -> list[MetricFamily]:
        out = []
        for name, unit in _FAMILIES:
            samples = [
                Sample(
                    name,
                    [("model_name", model), ("model_version", version), ("hostname", self.hostname)],
                    value,
                )
                for (model, version), value in sorted(self._values[name].items())
            ]
            out.append(MetricFamily(name, "counter", _help(name, unit), samples))
        return out + self._host_families() + self.streams.families(self.hostname)

    def _host_families(self) -> list[MetricFamily]:
        labels = [("Level", "Host"), ("Hostname", self.hostname)]
        out = [
            MetricFamily(
                name,
                "counter",
                _help(name, "Count"),
                [Sample(name, labels, self._responses[name])] if name in self._responses else [],
            )
            for name in _RESPONSE_CLASSES
        ]
        queue_time = [] if self._queue_time_ms is None else [Sample("QueueTime", labels, self._queue_time_ms)]
        out.append(
            MetricFamily(
                "QueueTime", "gauge", "Torchserve prometheus gauge metric with unit: Milliseconds", queue_time
            )
        )
        return out
