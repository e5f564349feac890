"""The management API's domain layer: what RegisterModel, UnregisterModel, ScaleWorker, SetDefault,
ListModels and DescribeModel do, whichever transport (gRPC 7071, REST 8081) asked. The transports only
convert their requests into these calls and the answers back (TorchServe's defaults differ per
transport, so each converter applies its own; everything else happens here, once).

Long operations (fetching and unpacking an archive, unregistering) run as Celery tasks
(:mod:`sluice_manager.operations.op_runner`); the call waits for their outcome. Worker counts are
desired state in Redis that the reconcile loop applies: a synchronous call then waits until the
workers are READY.
"""

import asyncio
import dataclasses
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from sluice.errors import ErrorCode, SluiceError, no_worker_message
from sluice.lifecycle.cancellation import cancel_and_wait
from sluice.log import get_logger
from sluice.registry import names
from sluice.registry.reader import check_weights, choose_version
from sluice.registry.records import VersionRecord

from sluice_manager.api.describe_job import DescribeJobs
from sluice_manager.api.management_calls import (
    NUMBER_GPU_REFUSED,
    RegisterRequest,
    ScaleRequest,
    Status,
    check_runtime,
    invalid_timeout,
    registered_message,
    scaled_message,
)
from sluice_manager.api.model_api import require_model_api
from sluice_manager.api.model_views import Json, describe_json, model_list, page
from sluice_manager.api.version_views import (
    MeasureUsage,
    no_usage,
    ready_workers,
    version_view,
    worker_counts,
)
from sluice_manager.models.archives import printable
from sluice_manager.models.fetch import URL_REQUIRED
from sluice_manager.models.version_config import RegisterOptions
from sluice_manager.stores import Stores
from sluice_manager.stores.operations import Operation, OpKind

log = get_logger(__name__)

ALL_VERSIONS = "all"
PROCESSING = "Processing worker updates..."
SCALING_IN_PROGRESS = "Workers scaling in progress..."


@dataclass(frozen=True)
class ManagementConfig:
    host: str
    model_api_enabled: bool = False
    lock_wait_s: float = 2.0
    # How long a call waits for its Celery operation (the visibility timeout bounds every task).
    operation_timeout_s: float = 3600.0
    unregister_timeout_s: float = 120.0
    # Consecutive worker failures after which a synchronous register or scale stops waiting.
    failures_before_giving_up: int = 3
    # How often a synchronous call looks at its workers (two cheap Redis reads): part of the
    # register-to-READY time a client sees, ~half of it on average.
    poll_interval_s: float = 0.02


Submit = Callable[[str], Awaitable[None]]


def failed_to_start(model: str, version: str) -> SluiceError:
    return SluiceError(ErrorCode.INTERNAL, f"Failed to start workers for model {model} version: {version}")


class ManagementService:
    def __init__(
        self,
        stores: Stores,
        config: ManagementConfig,
        *,
        submit: Submit,
        describe_jobs: DescribeJobs,
        wake: Callable[[], None] = lambda: None,
        measure_usage: MeasureUsage = no_usage,
    ) -> None:
        self.stores = stores
        self.registry = stores.registry
        self.config = config
        self.ops = stores.operations
        self._submit = submit
        self._describe_jobs = describe_jobs
        self._wake = wake
        self._measure_usage = measure_usage
        self._background: set[asyncio.Task[None]] = set()

    async def register(self, request: RegisterRequest) -> Status:
        require_model_api(self.config.model_api_enabled)
        if not request.url and not request.source_dir:
            raise SluiceError(ErrorCode.INVALID_ARGUMENT, URL_REQUIRED)
        check_runtime(request.runtime)
        options = RegisterOptions(
            url=request.url, model_name=request.model_name, handler=request.handler, runtime=request.runtime,
            batch_size=request.batch_size, max_batch_delay_ms=request.max_batch_delay_ms,
            response_timeout_s=request.response_timeout_s, startup_timeout_s=request.startup_timeout_s,
            initial_workers=request.initial_workers, source_dir=request.source_dir,
        )  # fmt: skip
        op = await self._run_operation(OpKind.REGISTER, dataclasses.asdict(options))
        if op.min_workers == 0:
            return Status(op.message)
        if not request.synchronous:
            return Status(PROCESSING, 202)
        record = await self.registry.get(op.model_name, op.version)
        if record is not None and await self._wait_for_workers(
            record, record.min_workers, record.max_workers
        ):
            return Status(registered_message(op.model_name, op.version, op.min_workers))
        await self._remove_after_failed_start(op.model_name, op.version)
        raise failed_to_start(op.model_name, op.version)

    async def unregister(self, model: str, version: str | None) -> Status:
        require_model_api(self.config.model_api_enabled)
        await self._resolve(model, version or "")
        op = await self._run_operation(OpKind.UNREGISTER, {"model_name": model, "version": version or ""})
        return Status(op.message)

    async def scale(self, request: ScaleRequest) -> Status:
        model = request.model_name
        if request.min_workers < 0:
            raise SluiceError(ErrorCode.INVALID_ARGUMENT, "min_worker cannot be negative.")
        if request.max_workers < request.min_workers:
            raise SluiceError(ErrorCode.INVALID_ARGUMENT, "max_worker cannot be less than min_worker.")
        if request.number_gpu:
            raise SluiceError(ErrorCode.INVALID_ARGUMENT, NUMBER_GPU_REFUSED)
        if request.stop_timeout_s is not None and request.stop_timeout_s < 0:
            raise SluiceError(ErrorCode.INVALID_ARGUMENT, invalid_timeout(request.stop_timeout_s))
        chosen = await self._resolve(model, request.version or "")
        updated = await self._set_workers(
            model, chosen, request.min_workers, request.max_workers, request.stop_timeout_s
        )
        self._wake()
        if not request.synchronous:
            if request.max_workers == 0:
                self._in_background(self._answer_queued_when_idle(updated))
            return Status(PROCESSING, 202)
        if await self._wait_for_workers(updated, request.min_workers, request.max_workers):
            if request.max_workers == 0:
                await self._answer_queued_when_idle(updated)
            return Status(scaled_message(model, request.version, request.min_workers))
        if await self._failing(model, chosen):
            raise failed_to_start(model, chosen)
        return Status(SCALING_IN_PROGRESS, 206)

    async def _set_workers(
        self, model: str, version: str, low: int, high: int, stop_timeout_s: int | None
    ) -> VersionRecord:
        """Store the version's new worker range and stop timeout (the reconcile loop applies them) and
        reset its restart backoff, under the model's lock."""
        async with self.stores.locks.hold(model, wait_s=self.config.lock_wait_s):
            record = await self._active_record(model, version)
            updated = dataclasses.replace(
                record, min_workers=low, max_workers=high, stop_timeout_s=stop_timeout_s
            )
            await self.stores.workers.clear_streak(model, version)
            await self.registry.update(updated, "scaled")
        log.info("model scaled", model=model, version=version, min_workers=low, max_workers=high,
                 stop_timeout_s=stop_timeout_s)  # fmt: skip
        return updated

    async def set_default(self, model: str, version: str) -> Status:
        names.check_model_name(model)
        async with self.stores.locks.hold(model, wait_s=self.config.lock_wait_s):
            _, versions = await self.registry.versions(model)
            if not versions:
                raise SluiceError(ErrorCode.MODEL_NOT_FOUND, f"Model not found: {model}")
            if version not in versions or not await self.registry.is_active(model, version):
                raise SluiceError(
                    ErrorCode.VERSION_NOT_FOUND, f"Model version {version} does not exist for model {model}"
                )
            await self.registry.set_default(model, version)
        log.info("default version changed", model=model, version=version)
        return Status(f'Default version successfully updated for model "{model}" to "{version}"')

    async def set_weights(self, model: str, weights: Mapping[str, object]) -> Status:
        """Split the calls that name no version of ``model`` between its versions by ``weights``
        (``{"1.0": 90, "2.0": 10}``); an empty mapping sends them to the default version again."""
        names.check_model_name(model)
        try:
            checked = check_weights(weights)
        except ValueError as exc:
            raise SluiceError(ErrorCode.INVALID_ARGUMENT, f"Invalid traffic weights: {exc}") from None
        async with self.stores.locks.hold(model, wait_s=self.config.lock_wait_s):
            _, versions = await self.registry.versions(model)
            if not versions:
                raise SluiceError(ErrorCode.MODEL_NOT_FOUND, f"Model not found: {model}")
            for version in sorted(checked):
                if version not in versions or not await self.registry.is_active(model, version):
                    raise SluiceError(
                        ErrorCode.VERSION_NOT_FOUND,
                        f"Model version {printable(version)} does not exist for model {model}",
                    )
            await self.registry.set_weights(model, checked)
        log.info("traffic weights changed", model=model, weights=checked)
        if not checked:
            return Status(f'Traffic weights cleared for model "{model}": calls go to its default version')
        shown = json.dumps(checked, sort_keys=True)
        return Status(f'Traffic weights successfully updated for model "{model}" to {shown}')

    async def list_models(self, limit: int, next_page_token: int) -> Json:
        """Every model's default version, in name order, paged; a workflow's function nodes (models
        without a URL) are left out before paging, as TorchServe leaves them out."""
        names = await self.registry.model_names()
        records = await self.registry.default_records(names)
        listed = [
            (name, record.model_url)
            for name in names
            if (record := records.get(name)) is not None and record.model_url
        ]
        window = page(len(listed), limit, next_page_token)
        return model_list(listed[window.start : window.stop], window.next_token)

    async def describe(
        self,
        model: str,
        version: str | None,
        *,
        customized: bool = False,
        headers: dict[str, str] | None = None,
        body: bytes = b"",
    ) -> list[Json]:
        names.check_model_name(model)
        default, versions = await self.registry.versions(model)
        if version == ALL_VERSIONS:
            if not versions:
                raise SluiceError(ErrorCode.MODEL_NOT_FOUND, f"Model not found: {model}")
            chosen = sorted(versions)
        else:
            chosen = [choose_version(model, version or "", default, versions)]
        launched = await self.stores.workers.launched()
        weights = (await self.registry.routing(model)).weights
        entries: list[Json] = []
        for name in chosen:
            record = await self.registry.get(model, name)
            if record is None:
                continue
            view = await version_view(self.stores, record, launched, self._measure_usage)
            extra = None
            if customized and version != ALL_VERSIONS:
                extra = await self._describe_jobs.customized(record, headers or {}, body)
            entry = describe_json(view, extra)
            if weights:
                # Sluice's canary: this version's share of the calls that name no version.
                entry["trafficWeight"] = weights.get(name, 0)
            entries.append(entry)
        if not entries:
            raise SluiceError(ErrorCode.MODEL_NOT_FOUND, f"Model not found: {model}")
        return entries

    async def model_ready(self, model: str) -> Json:
        """KServe v1 ``GET /v1/models/{m}``: ready when the default version has a READY worker."""
        chosen = await self._resolve(model, "")
        return {"name": model, "ready": await ready_workers(self.stores.workers, model, chosen) > 0}

    async def aclose(self) -> None:
        for task in list(self._background):
            # Looping tasks: redis-py can turn a cancellation into an error they carry on after.
            await cancel_and_wait(task)

    async def _resolve(self, model: str, version: str) -> str:
        names.check_model_name(model)
        return await self.registry.resolve(model, version)

    async def _active_record(self, model: str, version: str) -> VersionRecord:
        record = await self.registry.get_active(model, version)
        if record is None:
            raise SluiceError(
                ErrorCode.VERSION_NOT_FOUND, f"Model version: {version} does not exist for model: {model}"
            )
        return record

    async def _run_operation(self, kind: OpKind, params: dict[str, object]) -> Operation:
        op = await self.ops.create(kind, params)
        try:
            await self._submit(op.op_id)
        except Exception as exc:  # the broker is unreachable: the operation never starts
            log.warning("operation not submitted", op=op.op_id, error=repr(exc))
            error = SluiceError(ErrorCode.UNAVAILABLE, "Service unavailable: the task queue is unreachable.")
            await self.ops.fail(op, error)
            raise error from exc
        done = await self.ops.wait(op.op_id, timeout_s=self.config.operation_timeout_s)
        self._wake()
        if done.error_code:
            raise done.error()
        return done

    async def _wait_for_workers(self, record: VersionRecord, low: int, high: int) -> bool:
        """Until the version has at least ``low`` READY workers and at most ``high`` workers at all (the
        others drained and gone): True; False if its workers keep failing or its startup timeout passes."""
        model, version = record.model_name, record.version
        deadline = time.monotonic() + record.startup_timeout_s
        while True:
            ready, total = await worker_counts(self.stores.workers, model, version)
            if ready >= low and total <= high:
                return True
            if time.monotonic() >= deadline or await self._failing(model, version):
                return False
            await asyncio.sleep(self.config.poll_interval_s)

    async def _failing(self, model: str, version: str) -> bool:
        streak = await self.stores.workers.restart_streak(model, version)
        return streak.failures >= self.config.failures_before_giving_up

    async def _remove_after_failed_start(self, model: str, version: str) -> None:
        """TorchServe unregisters a model whose workers fail to start on a synchronous register."""
        try:
            await self._run_operation(OpKind.UNREGISTER, {"model_name": model, "version": version})
        except SluiceError as error:
            log.warning("could not unregister after a failed start", model=model, version=version,
                        error=error.message)  # fmt: skip

    async def _answer_queued_when_idle(self, record: VersionRecord) -> None:
        """Scaled to zero: once no worker is left, answer the jobs still queued (none would run them)."""
        model, version = record.model_name, record.version
        deadline = time.monotonic() + self.config.unregister_timeout_s
        while time.monotonic() < deadline:
            if not await self.stores.workers.any_worker(model, version):
                current = await self.registry.get(model, version)
                if current is not None and current.max_workers == 0:
                    error = SluiceError(ErrorCode.NO_WORKER, no_worker_message(model))
                    await self.stores.jobs.fail_all(model, version, error)
                return
            await asyncio.sleep(self.config.poll_interval_s)

    def _in_background(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
