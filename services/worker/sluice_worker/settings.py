"""The worker's settings: ``SLUICE_*`` environment, overridden by command-line flags.

Built once in ``__main__`` and passed down. Per-version behaviour (batch size, delays, timeouts,
max deliveries) is not here: it comes from the version's record in Redis, written by the manager.
"""

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from sluice.registry import names
from sluice.settings.common import CommonSettings
from sluice.typed import InvalidValue, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt


@dataclass(init=False, kw_only=True)
class WorkerSettings(CommonSettings):
    TS_KEYS: ClassVar[dict[str, str]] = {
        **CommonSettings.TS_KEYS,
        "decode_input_request": "decode_input_request",
        "ts_header_key_sequence_id": "header_key_sequence_id",
        "ts_header_key_sequence_start": "header_key_sequence_start",
        "ts_header_key_sequence_end": "header_key_sequence_end",
        "sluice_sequence_drain_s": "sequence_drain_s",
        "metrics_config": "metrics_config",
        "model_metrics_auto_detect": "model_metrics_auto_detect",
        "sluice_inline_handler": "inline_handler",
    }

    model_name: str
    model_version: str
    # None: take the next id from the shared counter (9000, 9001, ...).
    worker_id: str | None = None
    # None runs on the CPU; otherwise the CUDA device index handed to the handler.
    gpu_id: NonNegativeInt | None = None
    # torch.set_num_threads for this process; None keeps torch's default.
    torch_threads: PositiveInt | None = None
    heartbeat_interval_s: PositiveFloat = 1.0
    heartbeat_ttl_s: PositiveFloat = 3.0
    # How often the worker looks for jobs held by dead workers (it also looks once at startup).
    claim_scan_interval_s: PositiveFloat = 2.0
    # BLOCK of an idle XREADGROUP: bounds how late the loop notices SIGTERM or a due claim scan.
    read_block_ms: PositiveInt = 1000
    # How long to wait for the version record to appear (compose-scaled workers may start first); 0 = forever.
    record_wait_s: NonNegativeFloat = 120.0
    # TorchServe's key: REST bodies sent as application/json or text/* reach handlers decoded.
    decode_input_request: bool = True
    # Where models fetched from the manager are kept, one folder per artifact digest, shared by the
    # workers of this host ("" : <SLUICE_HOME>/model-cache; containers get a volume here).
    model_cache_dir: str = ""
    home: Path = Path("var")
    # Where a stateful handler finds the sequence (context.get_sequence_id): TorchServe's keys; the
    # gateway's must name the same headers.
    header_key_sequence_id: str = "ts_request_sequence_id"
    header_key_sequence_start: str = "ts_request_sequence_start"
    header_key_sequence_end: str = "ts_request_sequence_end"
    # A stopping worker of a stateful model whose handler cannot save sequence state serves the
    # sequences it holds until they close, for up to this long, before it hands them over (they are
    # then lost); with saved states it hands them over at once. Below the manager's
    # sluice_worker_stop_timeout_s, which ends in SIGKILL.
    sequence_drain_s: NonNegativeFloat = 20.0
    # TorchServe's key: the metrics definitions (ts_metrics, model_metrics) the handler's
    # context.metrics is built from; None: TorchServe's own ts/configs/metrics.yaml.
    metrics_config: Path | None = None
    # TorchServe's key: a metric a handler records that metrics_config does not declare is exported
    # with the kind, unit and dimensions its first line gives (off: it is dropped).
    model_metrics_auto_detect: bool = False
    # Plain batching of a stateless version runs its handler inline on the worker loop's own thread
    # (sluice_worker.modes.runner_for); off: on the torch thread, as the other modes do.
    inline_handler: bool = True

    def check(self) -> None:
        # These end up inside Redis keys and log lines.
        for name in ("model_name", "model_version", "worker_id"):
            value = getattr(self, name)
            if value is not None and not names.is_valid(value):
                raise InvalidValue(name, f"not a valid name: {value!r}")
        if self.heartbeat_ttl_s <= self.heartbeat_interval_s:
            raise InvalidValue("", "heartbeat_ttl_s must exceed heartbeat_interval_s")

    @property
    def model_cache_path(self) -> Path:
        return Path(self.model_cache_dir) if self.model_cache_dir else (self.home / "model-cache").absolute()

    @property
    def heartbeat_ttl_ms(self) -> int:
        return int(self.heartbeat_ttl_s * 1000)


def parse_args(argv: Sequence[str] | None = None) -> WorkerSettings:
    parser = argparse.ArgumentParser(prog="python -m sluice_worker", description="Serve one model version.")
    parser.add_argument("--model-name", dest="model_name")
    parser.add_argument("--model-version", dest="model_version")
    parser.add_argument("--worker-id", dest="worker_id")
    parser.add_argument("--gpu-id", dest="gpu_id", type=int)
    parser.add_argument("--torch-threads", dest="torch_threads", type=int)
    args = parser.parse_args(argv)
    overrides = {key: value for key, value in vars(args).items() if value is not None}
    return WorkerSettings(**overrides)
