"""Handler services for the unit tier's continuous-batching and async loops: TorchServe's real
``ts.service.Service`` around small handler functions written to TorchServe 0.12's contracts."""

import asyncio
from typing import Any

from sluice_worker.runtime import DEFAULT_METRICS_CONFIG
from ts.handler_utils.utils import send_intermediate_predict_response
from ts.metrics.metric_cache_yaml_impl import MetricsCacheYamlImpl
from ts.service import Service


def ts_service(entry_point: Any, batch_size: int = 4) -> Service:
    metrics = MetricsCacheYamlImpl(config_file_path=str(DEFAULT_METRICS_CONFIG))
    metrics.initialize_cache()
    return Service("m", ".", None, entry_point, None, batch_size, metrics_cache=metrics)


class Countdown:
    """A continuous-batching handler: a new request's data is how many tokens it wants (``b"3"``);
    each call answers one token ``"<n>"`` per running request (n counts from 1) and sets
    ``context.stopping_criteria`` so that a request ends with its last token. It records what each
    call saw: ``(request id, data)`` per row (data ``{}`` for a running request)."""

    def __init__(self, fail_on_call: int | None = None) -> None:
        self.calls: list[list[tuple[str, Any]]] = []
        self.wanted: dict[str, int] = {}
        self.given: dict[str, int] = {}
        self._fail_on_call = fail_on_call

    def handle(self, data: list[dict[str, Any]], context: Any) -> list[str]:
        ids = context.request_ids
        self.calls.append([(ids[i], row.get("data", {})) for i, row in enumerate(data)])
        if self._fail_on_call == len(self.calls):
            raise RuntimeError("boom")
        for vanished in set(self.wanted) - set(ids.values()):
            del self.wanted[vanished], self.given[vanished]
        tokens = []
        for index, row in enumerate(data):
            rid = ids[index]
            if row:
                self.wanted[rid] = int(bytes(row["data"]))
                self.given[rid] = 0
            self.given[rid] += 1
            tokens.append(str(self.given[rid]))
        context.stopping_criteria = [self._stop(ids[i]) for i in range(len(data))]
        return tokens

    def _stop(self, rid: str) -> Any:
        def done(_token: Any) -> bool:
            if self.given[rid] < self.wanted[rid]:
                return False
            del self.wanted[rid], self.given[rid]
            return True

        return done


async def async_countdown(data: list[dict[str, Any]], context: Any) -> list[str]:
    """An async handler (one request per call): ``b"3"`` answers "1", "2" as intermediates, then "3";
    ``b"hang"`` never ends (until cancelled)."""
    [row] = data
    wanted = bytes(row["data"])
    if wanted == b"hang":
        await asyncio.Event().wait()
    count = int(wanted)
    for token in range(1, count):
        send_intermediate_predict_response(
            [str(token)], context.request_ids, "Intermediate Prediction success", 200, context
        )
        await asyncio.sleep(0)
    return [str(count)]
