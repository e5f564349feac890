"""The management API's workflow calls, as TorchServe 0.12's ``WorkflowManager`` answers them:
register (``POST /workflows?url=``), unregister, list (paged as ``/models``) and describe.

Registering reads the archive (:mod:`sluice_manager.models.workflow_archive`), then registers every
node's member model ``<workflow>__<node>`` through the model API's own register call: synchronously,
concurrently, each with its node's batch size, delay and ``max-workers`` workers, as TorchServe does.
If any fails, those that succeeded are unregistered again and the call fails naming every failure.
The workflow's record is written last, so gateways never see a workflow whose members are not all
registered; unregistering removes the record first, then the members. Both need the model API, as
registering a model does (TorchServe 0.12 forgets that check for workflows; Sluice does not).
"""

import asyncio
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

from sluice.errors import ErrorCode, SluiceError
from sluice.log import get_logger
from sluice.registry import names
from sluice.registry.workflows import WorkflowRecord

from sluice_manager.api.management import ManagementService
from sluice_manager.api.management_calls import RegisterRequest
from sluice_manager.api.model_api import require_model_api
from sluice_manager.api.model_views import Json, page
from sluice_manager.models import archives
from sluice_manager.models.fetch import URL_REQUIRED, Download
from sluice_manager.models.workflow_archive import PreparedWorkflow, prepare
from sluice_manager.models.workflow_spec import Member

log = get_logger(__name__)

CONFLICT = "org.pytorch.serve.http.ConflictStatusException"
WORKFLOW_EXCEPTION = "org.pytorch.serve.archive.workflow.WorkflowException"
# Members registered at once (TorchServe registers them from a pool of 4 threads).
MEMBERS_AT_ONCE = 4


@dataclass(frozen=True)
class WorkflowConfig:
    workflow_store: Path | None
    models_dir: Path
    limits: archives.ExtractionLimits
    lock_wait_s: float = 2.0


@dataclass(frozen=True)
class RegisterWorkflowRequest:
    url: str
    workflow_name: str | None = None
    response_timeout_s: int | None = None
    startup_timeout_s: int | None = None


def workflow_not_found(name: str) -> SluiceError:
    return SluiceError(ErrorCode.WORKFLOW_NOT_FOUND, f"Workflow not found: {names.printable(name)}")


class WorkflowService:
    def __init__(
        self, models: ManagementService, config: WorkflowConfig, *, download: Download | None
    ) -> None:
        self._models = models
        self._registry = models.registry
        self._locks = models.stores.locks
        self._config = config
        self._download = download

    def _model_api(self) -> None:
        require_model_api(self._models.config.model_api_enabled)

    async def register(self, request: RegisterWorkflowRequest) -> str:
        self._model_api()
        if not request.url:
            raise SluiceError(ErrorCode.INVALID_ARGUMENT, URL_REQUIRED)
        staging = self._config.models_dir / f"{archives.STAGING_PREFIX}workflow-{uuid.uuid4().hex}"
        try:
            prepared = await prepare(
                request.url,
                request.workflow_name,
                workflow_store=self._config.workflow_store,
                staging=staging,
                downloader=self._download,
                limits=self._config.limits,
            )
            record = prepared.spec.record
            async with self._locks.hold(_lock_name(record.name), wait_s=self._config.lock_wait_s):
                await self._register_locked(prepared, request)
        finally:
            await asyncio.to_thread(shutil.rmtree, staging, True)
        log.info("workflow registered", workflow=record.name, url=request.url, members=record.members)
        return f"Workflow {record.name} has been registered and scaled successfully."

    async def _register_locked(self, prepared: PreparedWorkflow, request: RegisterWorkflowRequest) -> None:
        record = prepared.spec.record
        if await self._registry.workflow(record.name) is not None:
            raise SluiceError(
                ErrorCode.CONFLICT, f"Workflow {record.name} is already registered.", exception_class=CONFLICT
            )
        members = prepared.spec.members
        # A member name that is a model already would add a version to someone else's model.
        taken = [member.model for member in members if (await self._registry.versions(member.model))[1]]
        if taken:
            raise SluiceError(
                ErrorCode.CONFLICT,
                f"Workflow {record.name} cannot register its nodes: models {', '.join(taken)} exist",
                exception_class=CONFLICT,
            )
        slots = asyncio.Semaphore(MEMBERS_AT_ONCE)
        outcomes = await asyncio.gather(
            *(self._register_member(member, prepared, request, slots) for member in members)
        )
        failures = [
            _failure(member, outcome)
            for member, outcome in zip(members, outcomes, strict=True)
            if outcome is not None
        ]
        if failures:
            registered = [
                member.model for member, outcome in zip(members, outcomes, strict=True) if outcome is None
            ]
            failures += await self._remove_members(registered)
            failed = f"Workflow {record.name} has failed to register. Failures: [{', '.join(failures)}]"
            raise SluiceError(ErrorCode.INTERNAL, failed, exception_class=WORKFLOW_EXCEPTION)
        if not await self._registry.add_workflow(record):
            await self._remove_members(record.members)
            raise SluiceError(
                ErrorCode.CONFLICT, f"Workflow {record.name} is already registered.", exception_class=CONFLICT
            )

    async def _register_member(
        self,
        member: Member,
        prepared: PreparedWorkflow,
        request: RegisterWorkflowRequest,
        slots: asyncio.Semaphore,
    ) -> BaseException | None:
        function_dir = prepared.function_dirs.get(member.node)
        try:
            async with slots:
                await self._models.register(
                    RegisterRequest(
                        url=member.url,
                        model_name=member.model,
                        batch_size=member.settings.batch_size,
                        max_batch_delay_ms=member.settings.max_batch_delay_ms,
                        initial_workers=1 if function_dir is not None else member.settings.max_workers,
                        synchronous=True,
                        response_timeout_s=request.response_timeout_s,
                        startup_timeout_s=request.startup_timeout_s,
                        source_dir=str(function_dir) if function_dir is not None else None,
                    )
                )
        except SluiceError as error:
            return error
        except Exception as exc:  # reported with its member's name; the traceback goes to the log
            log.exception("workflow member failed to register", member=member.model)
            return exc
        return None

    async def unregister(self, name: str) -> str:
        self._model_api()
        if not names.is_valid(name):
            raise workflow_not_found(name)
        async with self._locks.hold(_lock_name(name), wait_s=self._config.lock_wait_s):
            record = await self._registry.workflow(name)
            if record is None:
                raise workflow_not_found(name)
            await self._registry.remove_workflow(name)
            failures = await self._remove_members(record.members)
        if failures:
            raise SluiceError(
                ErrorCode.INTERNAL,
                f"Error while unregistering the workflow {name}. Details: [{', '.join(failures)}]",
            )
        log.info("workflow unregistered", workflow=name)
        return f'Workflow "{name}" unregistered'

    async def _remove_members(self, members: list[str]) -> list[str]:
        """Unregister each member model (one already gone is fine: a retried removal); what failed."""
        failures = []
        for member in members:
            try:
                await self._models.unregister(member, None)
            except SluiceError as error:
                if error.code is not ErrorCode.MODEL_NOT_FOUND:
                    log.warning("workflow member not unregistered", member=member, error=error.message)
                    failures.append(f"Error while unregistering workflow node {member}: {error.message}")
        return failures

    async def listing(self, limit: int, next_page_token: int) -> Json:
        all_names = await self._registry.workflow_names()
        window = page(len(all_names), limit, next_page_token)
        body: Json = {} if window.next_token is None else {"nextPageToken": window.next_token}
        entries = []
        for name in all_names[window.start : window.stop]:
            record = await self._registry.workflow(name)
            if record is not None:
                entries.append({"workflowName": name, "workflowUrl": record.url})
        body["workflows"] = entries
        return body

    async def describe(self, name: str) -> list[Json]:
        record = await self._registry.workflow(name) if names.is_valid(name) else None
        if record is None:
            raise workflow_not_found(name)
        return [_description(record)]


def _lock_name(workflow: str) -> str:
    """The lock of a workflow's calls: apart from the lock of a model of the same name ("/" is in no
    model name)."""
    return f"workflow/{workflow}"


def _failure(member: Member, outcome: BaseException | None) -> str:
    detail = outcome.message if isinstance(outcome, SluiceError) else "Check error logs."
    return f"Workflow Node {member.model} failed to register. Details: {detail}"


def _description(record: WorkflowRecord) -> Json:
    return {
        "workflowName": record.name,
        "workflowUrl": record.url,
        "minWorkers": record.min_workers,
        "maxWorkers": record.max_workers,
        "batchSize": record.batch_size,
        "maxBatchDelay": record.max_batch_delay_ms,
        "workflowDag": record.dag_text,
    }
