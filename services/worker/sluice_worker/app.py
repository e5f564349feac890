"""Wiring of one worker process: record -> model folder -> worker id -> handler -> warm-up -> group ->
READY -> serve -> withdraw. Returns the process exit code (see :class:`sluice_worker.exit_codes.ExitCode`)."""

import asyncio
import contextlib
import dataclasses
import gc
import os
import signal
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import redis.asyncio as aioredis
import structlog
from sluice.log import get_logger
from sluice.redis import client as redis_client
from sluice.redis.link import RedisLink, open_link
from sluice.registry import reader as registry
from sluice.registry.records import VersionRecord, WorkerRecord, WorkerStatus
from sluice.tracing import start as start_tracing

from sluice_worker import device, runtime
from sluice_worker.broker.artifact_endpoint import RedisArtifactEndpoints
from sluice_worker.broker.job_stream import JobQueue
from sluice_worker.broker.metrics_writer import MetricsWriter
from sluice_worker.broker.presence import Presence
from sluice_worker.broker.reclaim import Reclaimer
from sluice_worker.broker.redis_source import RedisJobSource
from sluice_worker.broker.retries import best_effort, until_done
from sluice_worker.broker.sequences.source import SequenceJobSource
from sluice_worker.broker.source import JobSource
from sluice_worker.broker.version_record import wait_for_record
from sluice_worker.exit_codes import ExitCode
from sluice_worker.handler_loop import HandlerLoop
from sluice_worker.inline_runner import InlineRunner
from sluice_worker.metric_capture import capturing
from sluice_worker.model_fetch import FetchError, model_folder
from sluice_worker.model_metrics import ModelMetrics, declared_metrics
from sluice_worker.modes import Abandon, Loop, build_loop, nothing_to_abandon, runner_for
from sluice_worker.sequence_state import SequenceStates
from sluice_worker.settings import WorkerSettings
from sluice_worker.startup import enter_model_dir, export_sequence_header_names
from sluice_worker.torch_thread import HandlerExit, TorchThread
from sluice_worker.traced_source import TracedSource
from sluice_worker.usage import usage_refresher
from sluice_worker.warmup import WarmupFailed, warm_up
from sluice_worker.worker import Worker

if TYPE_CHECKING:  # OpenTelemetry is imported only when tracing is on
    from sluice.tracing.otel import Tracing

log = get_logger(__name__)

# How long a stopping worker waits for Redis to withdraw and leave its group (a failover takes less).
LAST_STEPS_WITHIN_S = 10.0


async def run(settings: WorkerSettings, torch_thread: TorchThread) -> ExitCode:
    structlog.contextvars.bind_contextvars(model=settings.model_name, version=settings.model_version)
    redis = redis_client.connect(settings.redis_url)
    # The hot path's pipelined connection: its reply timeout covers the longest blocking read.
    hot = open_link(
        settings.redis_url,
        timeout_s=settings.read_block_ms / 1000 + redis_client.COMMAND_TIMEOUT_S,
        name="jobs",
    )
    metrics = ModelMetrics(
        declared_metrics(settings.metrics_config or runtime.DEFAULT_METRICS_CONFIG),
        settings.model_metrics_auto_detect,
    )
    tracing = start_tracing("worker")
    try:
        with capturing(metrics):
            return await _run(settings, torch_thread, redis, hot, metrics, tracing)
    finally:
        if tracing is not None:
            await asyncio.to_thread(tracing.shutdown)
        await hot.close()
        await redis.aclose()


@dataclass(frozen=True)
class _Started:
    worker_id: str
    worker: Loop
    presence: Presence
    source: RedisJobSource | SequenceJobSource
    runner: TorchThread | InlineRunner
    # A stateful model's: whether its handler saves sequence state (see _stop_serving).
    saves_state: bool = False


async def _run(
    settings: WorkerSettings,
    torch_thread: TorchThread,
    redis: "aioredis.Redis",
    hot: RedisLink,
    metrics: ModelMetrics,
    tracing: "Tracing | None",
) -> ExitCode:
    # SIGTERM sets `stop`; the loop stops reading once `serving_stop` is set (see _stop_serving).
    stop = asyncio.Event()
    serving_stop = asyncio.Event()
    _on_signals(stop)
    starting = asyncio.create_task(
        _start(settings, torch_thread, redis, hot, serving_stop, tracing), name="startup"
    )
    stop_requested = asyncio.create_task(stop.wait(), name="stop")
    await asyncio.wait({starting, stop_requested}, return_when=asyncio.FIRST_COMPLETED)
    stop_requested.cancel()
    if not starting.done():
        # SIGTERM while waiting for the record or loading the handler: nothing was announced yet.
        starting.cancel()
        log.info("stopped during startup")
        return ExitCode.OK
    started = starting.result()
    if isinstance(started, ExitCode):
        return started
    # The startup task bound it in its own context copy.
    structlog.contextvars.bind_contextvars(worker=started.worker_id)
    heartbeat = asyncio.create_task(started.presence.run(), name="heartbeat")
    metrics_writer = MetricsWriter(redis, settings.model_name, settings.model_version, metrics)
    writing_metrics = asyncio.create_task(metrics_writer.run(), name="handler metrics")
    stopping = asyncio.create_task(_stop_serving(stop, serving_stop, started, settings), name="stopping")
    try:
        exit_code = await started.worker.serve()
    finally:
        stopping.cancel()
        writing_metrics.cancel()
        started.presence.stop()
        await heartbeat
    with contextlib.suppress(asyncio.CancelledError):
        await writing_metrics
    if isinstance(started.runner, InlineRunner):
        started.runner.close()
    await metrics_writer.write()
    # Without them the heartbeat lapses and peers reap the worker and take over its jobs.
    await best_effort(started.presence.withdraw, "withdraw", LAST_STEPS_WITHIN_S)
    await best_effort(started.source.leave, "leave the consumer group", LAST_STEPS_WITHIN_S)
    log.info("worker stopped", exit_code=int(exit_code))
    return exit_code


async def _stop_serving(
    stop: asyncio.Event, serving_stop: asyncio.Event, started: _Started, settings: WorkerSettings
) -> None:
    """On SIGTERM, stop the loop's reading. A stateful model's worker first says it is UNLOADING
    (no new sequences come to it) and, when its handler cannot save sequence state, serves the
    sequences it holds until they close or ``sequence_drain_s`` passes; the rest are handed over
    when it leaves (lost, for such a handler)."""
    await stop.wait()
    source = started.source
    if isinstance(source, SequenceJobSource):
        source.drain()
        await until_done(lambda: started.presence.set_status(WorkerStatus.UNLOADING), "announce UNLOADING")
        if not started.saves_state and source.holding:
            log.info("serving held sequences before stopping", sequences=source.holding)
            try:
                await asyncio.wait_for(source.none_held(), settings.sequence_drain_s)
            except TimeoutError:
                log.warning("sequences still open; handing them over", sequences=source.holding)
    serving_stop.set()


async def _start(
    settings: WorkerSettings,
    torch_thread: TorchThread,
    redis: "aioredis.Redis",
    hot: RedisLink,
    stop: asyncio.Event,
    tracing: "Tracing | None",
) -> _Started | ExitCode:
    model, version = settings.model_name, settings.model_version
    record = await wait_for_record(redis, model, version, settings.record_wait_s)
    if record is None:
        log.error("version record not found; is the model registered?", waited_s=settings.record_wait_s)
        return ExitCode.LOAD_FAILED
    began = time.monotonic()
    worker_id = settings.worker_id
    if worker_id is None:
        worker_id = await until_done(lambda: registry.next_worker_id(redis), "worker id")
    structlog.contextvars.bind_contextvars(worker=worker_id)

    try:
        endpoints = RedisArtifactEndpoints(redis)
        folder = await model_folder(record, endpoints, settings.model_cache_path, record.startup_timeout_s)
    except FetchError as exc:
        log.error("cannot get the model's files", error=str(exc))
        return ExitCode.LOAD_FAILED
    record = dataclasses.replace(record, model_dir=str(folder))
    export_sequence_header_names(
        settings.header_key_sequence_id, settings.header_key_sequence_start, settings.header_key_sequence_end
    )
    try:
        enter_model_dir(record.model_dir, record.handler)
    except OSError as exc:
        # The models folder of an earlier run, gone while its registration stayed in Redis.
        log.error("cannot enter the model folder", model_dir=record.model_dir, error=exc.strerror)
        return ExitCode.LOAD_FAILED
    runner = runner_for(settings, record, torch_thread)
    started = await _ready(settings, record, runner, redis, hot, stop, tracing, worker_id, began)
    if isinstance(started, ExitCode) and runner is not torch_thread:
        runner.close()
    return started


async def _ready(
    settings: WorkerSettings,
    record: VersionRecord,
    runner: TorchThread | InlineRunner,
    redis: "aioredis.Redis",
    hot: RedisLink,
    stop: asyncio.Event,
    tracing: "Tracing | None",
    worker_id: str,
    began: float,
) -> _Started | ExitCode:
    """Load the handler, warm it up, join the job stream, announce READY (the loop ready to serve)."""
    model, version = record.model_name, record.version
    loaded = await _load(settings, record, runner)
    if loaded is None:
        return ExitCode.LOAD_FAILED
    service, choice = loaded
    load_ms = int((time.monotonic() - began) * 1000)
    # One handler loop for the warm-up and the serving: an async handler's state stays on one loop.
    handler_loop = (
        HandlerLoop(on_start=lambda: device.activate(choice)) if record.async_communication else None
    )

    def loop_of(
        source: JobSource,
        stopping: asyncio.Event,
        states: SequenceStates | None = None,
        abandon: Abandon = nothing_to_abandon,
    ) -> Loop:
        return build_loop(record, settings, source, runner, service, handler_loop, stopping, states, abandon)

    if record.warmup_requests:
        try:
            await warm_up(record, Path(record.model_dir), loop_of, record.startup_timeout_s)
        except WarmupFailed as exc:
            log.error("warm-up failed; the worker does not serve", error=str(exc))
            return ExitCode.LOAD_FAILED

    source: RedisJobSource | SequenceJobSource
    sequences = None
    if record.stateful:
        source = SequenceJobSource(redis, hot, record, worker_id)
        await until_done(source.start, "find the sequence inboxes")
        assert isinstance(runner, TorchThread)  # stateful models do not run inline (modes.runner_for)
        sequences = SequenceStates(runtime.sequence_hooks(service), record.sequence_state_max_bytes, runner)
    else:
        source = await _job_queue_source(redis, hot, record, worker_id, settings)
    # Traced calls' jobs get the worker's spans (tracing on).
    served: JobSource = source if tracing is None else TracedSource(source, tracing, worker_id)
    worker = loop_of(
        served,
        stop,
        sequences,
        source.finish_commands if isinstance(source, RedisJobSource) else nothing_to_abandon,
    )
    presence = Presence(
        redis,
        model,
        version,
        _worker_record(worker_id, choice, load_ms),
        interval_s=settings.heartbeat_interval_s,
        ttl_ms=settings.heartbeat_ttl_ms,
        refresh=usage_refresher(
            choice,
            runner.busy_s,
            running=lambda: 0 if isinstance(worker, Worker) else worker.running,
            slots=record.slots_per_worker if record.generative else 0,
        ),
    )
    await until_done(presence.announce, "announce READY")
    if isinstance(runner, InlineRunner):
        runner.guard.present_as(presence.beat_commands, presence.withdraw_commands)
    # What startup built (modules, the model, the handler) lives as long as the process: keep it out
    # of the collector's work from now on.
    gc.freeze()
    log.info(
        "worker ready",
        device=choice.device,
        batch_size=record.batch_size,
        policy=record.batch_policy.value,
        mode=type(worker).__name__,
        handler_thread="inline" if isinstance(runner, InlineRunner) else "torch",
    )
    return _Started(
        worker_id, worker, presence, source, runner, saves_state=bool(sequences and sequences.saves_state)
    )


async def _job_queue_source(
    redis: "aioredis.Redis",
    hot: RedisLink,
    record: VersionRecord,
    worker_id: str,
    settings: WorkerSettings,
) -> RedisJobSource:
    """The version's shared job stream, read through its consumer group."""
    model, version = record.model_name, record.version
    queue = JobQueue(redis, hot, model, version, consumer=worker_id)
    await until_done(queue.ensure_group, "create consumer group")
    reclaimer = Reclaimer(
        redis,
        queue,
        model,
        version,
        max_deliveries=record.max_deliveries,
        min_idle_ms=settings.heartbeat_ttl_ms,
    )
    return RedisJobSource(queue, reclaimer)


async def _load(
    settings: WorkerSettings, record: VersionRecord, runner: TorchThread | InlineRunner
) -> tuple[runtime.HandlerService, device.DeviceChoice] | None:
    """The loaded ``ts.service.Service`` and its device, or None (logged) when loading failed."""
    try:
        choice = device.choose_device(settings.gpu_id, *device.probe())
    except device.DeviceError as exc:
        log.error("device not available", error=str(exc))
        return None
    if choice.fallback_reason:
        log.warning("running on the CPU", reason=choice.fallback_reason)
    spec = runtime.LoadSpec(
        model_name=record.model_name,
        model_dir=record.model_dir,
        handler=record.handler,
        batch_size=max(1, record.batch_size),
        envelope=record.envelope,
        choice=choice,
        torch_threads=settings.torch_threads,
        tensors=record.tensors,
        metrics_config=settings.metrics_config,
    )
    started = time.monotonic()
    try:
        if isinstance(runner, InlineRunner):
            service = await runner.run_within(
                record.startup_timeout_s, list, runtime.load_service, spec, exit_code=ExitCode.LOAD_FAILED
            )
        else:
            service = await asyncio.wait_for(runner.run(runtime.load_service, spec), record.startup_timeout_s)
    except TimeoutError:
        log.error("handler did not load within startup_timeout", startup_timeout_s=record.startup_timeout_s)
        return None
    except (Exception, HandlerExit):
        log.exception("handler failed to load", handler=record.handler, model_dir=record.model_dir)
        return None
    log.info("handler loaded", handler=record.handler, load_s=round(time.monotonic() - started, 3))
    return service, choice


def _worker_record(worker_id: str, choice: device.DeviceChoice, load_ms: int) -> WorkerRecord:
    return WorkerRecord(
        worker_id=worker_id,
        pid=os.getpid(),
        host=socket.gethostname(),
        status=WorkerStatus.READY,
        started_unix_ms=int(time.time() * 1000),
        device=choice.device,
        gpu=choice.is_gpu,
        load_ms=load_ms,
    )


def _on_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, _request_stop, stop, sig)


def _request_stop(stop: asyncio.Event, sig: signal.Signals) -> None:
    if not stop.is_set():
        log.info("stop requested: finishing the jobs in hand", signal=sig.name)
    stop.set()
