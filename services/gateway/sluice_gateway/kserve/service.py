"""The KServe v2 / Open Inference Protocol service, transport-agnostic: health, metadata, configuration,
statistics, repository index and inference over the :class:`DataPlane`.

Transports convert their request into :class:`KServeRequest` (and keep the original bytes, which go to
the worker undecoded as ``Job.request``), await one call here and convert the result back. Requests
are checked against the version they resolve to before anything is enqueued
(:mod:`sluice_gateway.kserve.validation`). Responses are built by the worker; this layer returns them as
bytes. Triton's sequence parameters route a stateful model's request to its sequence (the handler
sees TorchServe's sequence headers instead of them).
"""

import dataclasses
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from sluice.envelope import Reply, WireProtocol
from sluice.errors import ErrorCode, SluiceError
from sluice.registry import names
from sluice.registry.records import VersionRecord
from sluice.registry.workflows import WorkflowRecord

from sluice_gateway.broker.seam import UNAVAILABLE_MESSAGE, BrokerUnavailable, ClusterReader
from sluice_gateway.dataplane import DataPlane, InferenceCall
from sluice_gateway.inflight import PendingJob, StreamJob
from sluice_gateway.kserve import max_form
from sluice_gateway.kserve.grpc_wire import without_parameters
from sluice_gateway.kserve.metadata import EXTENSIONS, SERVER_NAME, ModelConfigView, ModelMetadata
from sluice_gateway.kserve.metadata import model_config as build_model_config
from sluice_gateway.kserve.metadata import model_metadata as build_model_metadata
from sluice_gateway.kserve.readiness import RegistryReadiness, version_ready
from sluice_gateway.kserve.request import (
    SEQUENCE_PARAMETERS,
    KServeRequest,
    RequestOptions,
    request_options,
)
from sluice_gateway.kserve.shared_memory import EXTENSION as SHARED_MEMORY_EXTENSION
from sluice_gateway.kserve.shared_memory import SharedMemory, Spans, refuse_for_workflow
from sluice_gateway.kserve.stats import InferenceStats, Outcome, VersionStats
from sluice_gateway.kserve.validation import check_request
from sluice_gateway.registry_cache import VersionResolver, model_not_found
from sluice_gateway.sequences import correlation_id_required
from sluice_gateway.workflows import kserve as workflow_kserve
from sluice_gateway.workflows.executor import WorkflowCall, workflow_call
from sluice_gateway.workflows.service import Workflows

T = TypeVar("T")

DECOUPLED_UNARY_MESSAGE = "ModelInfer RPC doesn't support models with decoupled transaction policy"
# A KServe model_version that names the default version when the model has no version of that name:
# Modular MAX numbers a model's only version "0", and its clients ask for it by that number.
DEFAULT_VERSION_ALIAS = "0"


@dataclass(frozen=True, slots=True)
class ServerMetadata:
    name: str
    version: str
    extensions: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class StatsEntry:
    model: str
    version: str
    stats: VersionStats


@dataclass(frozen=True, slots=True)
class IndexEntry:
    model: str
    version: str
    state: str  # READY or UNAVAILABLE
    reason: str


class InferStream(Protocol):
    """One request of a streaming rpc, as its transport reads it: its replies (ModelInferResponse
    payloads) in order, the final one last."""

    request: KServeRequest
    options: RequestOptions
    # Whether the request may be answered more than once.
    decoupled: bool

    def replies(self) -> AsyncGenerator[Reply, None]: ...

    def close(self) -> None: ...


class KServeStream:
    """One streamed inference: its replies in order (the final one last), then stats are recorded."""

    def __init__(
        self,
        service: "KServeService",
        job: StreamJob,
        request: KServeRequest,
        options: RequestOptions,
        *,
        decoupled: bool,
        batch_size: int = 1,
    ) -> None:
        self._service = service
        self._job = job
        self._batch_size = batch_size
        self.request = request
        self.options = options
        # A decoupled model answers 0..N times per request; any other model exactly once.
        self.decoupled = decoupled
        self.model = job.model
        self.version = job.version

    async def replies(self) -> AsyncGenerator[Reply, None]:
        started_ns = time.monotonic_ns()
        ok = False
        try:
            async for reply in self._job.replies():
                yield reply
            ok = True
        finally:
            self._job.close()
            self._service.record_outcome(self._job, self._batch_size, ok, started_ns)

    def close(self) -> None:
        self._job.close()


@dataclass(slots=True)
class _Admission:
    """The call handed to the data plane, and what admitting it learnt (the request's batch size)."""

    call: InferenceCall
    batch_size: int = 1


class KServeService:
    def __init__(
        self,
        plane: DataPlane,
        resolver: VersionResolver,
        reader: ClusterReader,
        workflows: Workflows,
        *,
        gateway_ready: Callable[[], Awaitable[bool]],
        version: str,
        shared_memory: SharedMemory,
        stats: InferenceStats | None = None,
    ) -> None:
        self._plane = plane
        self.shared_memory = shared_memory
        self._resolver = resolver
        self._reader = reader
        self._workflows = workflows
        self._readiness = RegistryReadiness(reader)
        self._gateway_ready = gateway_ready
        self._version = version
        self.stats = stats if stats is not None else InferenceStats()

    # Health and metadata -------------------------------------------------------------------------
    def live(self) -> bool:
        return True

    async def ready(self) -> bool:
        return await self._gateway_ready() and await self._readiness.startup_models_ready()

    def server_metadata(self) -> ServerMetadata:
        extensions = EXTENSIONS + ((SHARED_MEMORY_EXTENSION,) if self.shared_memory.enabled else ())
        return ServerMetadata(SERVER_NAME, self._version, extensions)

    async def model_ready(self, model: str, version: str) -> bool:
        try:
            record = await self.record(model, version)
        except SluiceError as error:
            workflow = await self._workflows.instead_of_model(error, model)
            return all([await self.model_ready(member, "") for member in workflow.members])
        live = await self._broker_call(self._readiness.live_workers(record.model_name, record.version))
        return version_ready(record.min_workers, live)

    async def model_metadata(self, model: str, version: str) -> ModelMetadata:
        try:
            record = await self.record(model, version)
        except SluiceError as error:
            return workflow_kserve.metadata(await self._workflows.instead_of_model(error, model))
        _default, versions = await self._broker_call(self._reader.model_versions(record.model_name))
        return build_model_metadata(record, versions or {record.version})

    async def model_config(self, model: str, version: str) -> ModelConfigView:
        try:
            return build_model_config(await self.record(model, version))
        except SluiceError as error:
            workflow = await self._workflows.instead_of_model(error, model)
        (leaf, *others) = workflow.leaves
        decoupled = not others and (await self.record(leaf.model, "")).generative
        return workflow_kserve.config(workflow, decoupled=decoupled)

    async def record(self, model: str, version: str) -> VersionRecord:
        """The record of ``model``/``version`` ("" = default); NOT_FOUND naming the model or version.
        A version string that cannot be a version name is INVALID_ARGUMENT."""
        if version and not names.is_valid(version):
            raise invalid_version(model)
        model = names.check_model_name(model)
        return await self._resolver.resolve(model, await self._resolved_name(model, version))

    async def _resolved_name(self, model: str, version: str) -> str:
        """The version a KServe request for ``model``/``version`` runs on: as named, except
        :data:`DEFAULT_VERSION_ALIAS`, which is the default version ("") unless the model has a version
        of that name. Every KServe call (gRPC and REST) resolves its version through here."""
        if version != DEFAULT_VERSION_ALIAS:
            return version
        try:
            await self._resolver.resolve(names.check_model_name(model), version)
        except SluiceError as error:
            if error.code is ErrorCode.VERSION_NOT_FOUND:
                return ""
            raise
        return version

    async def _with_version(self, request: KServeRequest) -> KServeRequest:
        """``request`` naming the version :meth:`_resolved_name` chooses."""
        version = await self._resolved_name(request.model, request.version)
        return request if version == request.version else dataclasses.replace(request, version=version)

    # Inference -----------------------------------------------------------------------------------
    async def infer(
        self,
        request: KServeRequest,
        raw: bytes,
        timeout_s: float | None,
        *,
        decoupled_refusal: str | None = DECOUPLED_UNARY_MESSAGE,
    ) -> bytes:
        """Run one request to its final reply; returns the worker-built ModelInferResponse bytes.

        A decoupled model is refused with ``decoupled_refusal`` (its answer is a stream; None: taken),
        unless it is generative: the job is ``final_only``, so its worker joins the chunks into the
        final reply."""
        request, raw = max_form.complete(request, raw)
        options = request_options(request.parameters)
        _check_version_name(request)
        spans = await self.shared_memory.spans(request)
        try:
            request = await self._with_version(request)
            admission = self._admission(
                request, raw, options, timeout_s, spans, decoupled_refusal=decoupled_refusal
            )
            job = await self._plane.submit(admission.call)
        except SluiceError as error:
            workflow = await self._workflows.instead_of_model(error, request.model)
            refuse_for_workflow(request, workflow)
            call = self._workflow_call(workflow, raw, _earliest(timeout_s, options.timeout_s))
            answer = await self._workflows.answer(call)
            return workflow_kserve.response(workflow, request.request_id, answer, typed=options.typed_outputs)
        started_ns, ok = time.monotonic_ns(), False
        try:
            reply = await job.result()
            ok = True
            return reply.payload
        finally:
            job.close()
            self.record_outcome(job, admission.batch_size, ok, started_ns)

    async def open_stream(self, request: KServeRequest, raw: bytes, timeout_s: float | None) -> InferStream:
        """Admit one request of a streaming rpc. A decoupled model's job streams (runs alone, every
        intermediate result is a response); any other model's job may share a batch and answers once.
        A workflow's request streams its last node's chunks."""
        request, raw = max_form.complete(request, raw)
        options = request_options(request.parameters)
        spans = await self.shared_memory.spans(request)
        try:
            request = await self._with_version(request)
            decoupled = (await self.record(request.model, request.version)).tensors.decoupled
        except SluiceError as error:
            workflow = await self._workflows.instead_of_model(error, request.model)
            refuse_for_workflow(request, workflow)
            call = self._workflow_call(workflow, raw, _earliest(timeout_s, options.timeout_s))
            return workflow_kserve.WorkflowStream(self._workflows, call, request, options)
        admission = self._admission(request, raw, options, timeout_s, spans, stream_in_batch=not decoupled)
        job = await self._plane.submit_stream(admission.call)
        return KServeStream(self, job, request, options, decoupled=decoupled, batch_size=admission.batch_size)

    def _admission(
        self,
        request: KServeRequest,
        raw: bytes,
        options: RequestOptions,
        timeout_s: float | None,
        spans: Spans,
        *,
        decoupled_refusal: str | None = None,
        stream_in_batch: bool = False,
    ) -> "_Admission":
        """``decoupled_refusal``: how a call refuses a decoupled model that is not generative (None:
        it takes it, as streams do)."""

        def admit(record: VersionRecord) -> None:
            if decoupled_refusal is not None and record.tensors.decoupled and not record.generative:
                raise SluiceError(ErrorCode.NOT_IMPLEMENTED, decoupled_refusal)
            check_request(request, record.tensors)
            if record.tensors.max_batch_size > 0 and request.inputs and request.inputs[0].shape:
                admission.batch_size = request.inputs[0].shape[0]

        if not SEQUENCE_PARAMETERS.isdisjoint(request.parameters):
            raw = without_parameters(raw, SEQUENCE_PARAMETERS)
        call = InferenceCall(
            protocol=WireProtocol.KSERVE,
            model=request.model,
            version=request.version,
            request=raw,
            timeout_s=_earliest(timeout_s, options.timeout_s),
            admit=admit,
            stream_in_batch=stream_in_batch,
            sequence=options.sequence,
            missing_sequence=correlation_id_required(request.model),
            shm_inputs=spans[0],
            shm_outputs=spans[1],
        )
        admission = _Admission(call)
        return admission

    @staticmethod
    def _workflow_call(workflow: WorkflowRecord, raw: bytes, timeout_s: float | None) -> WorkflowCall:
        _request_id, body = workflow_kserve.request_body(workflow, raw)
        return workflow_call(workflow, [("body", body)], timeout_s)

    def record_outcome(self, job: PendingJob, batch_size: int, ok: bool, started_ns: int) -> None:
        now_ms = time.time_ns() // 1_000_000
        duration_ns = time.monotonic_ns() - started_ns
        queue_ns = None
        if ok and job.started_unix_ms and job.enqueued_unix_ms:
            queue_ns = max(job.started_unix_ms - job.enqueued_unix_ms, 0) * 1_000_000
        self.stats.record(job.model, job.version, Outcome(ok, duration_ns, now_ms, batch_size, queue_ns))

    # Statistics and repository -------------------------------------------------------------------
    async def statistics(self, model: str, version: str) -> list[StatsEntry]:
        """Counters of ``model`` (every version when ``version`` is ""), or of every model."""
        if model:
            record = await self.record(model, version) if version else None
            versions = [record.version] if record else sorted(await self._versions(model))
            return [StatsEntry(model, v, self.stats.get(model, v)) for v in versions]
        return [
            StatsEntry(name, v, self.stats.get(name, v))
            for name in await self._model_names()
            for v in sorted(await self._versions(name))
        ]

    async def repository_index(self, ready_only: bool) -> list[IndexEntry]:
        entries = []
        for name in await self._model_names():
            for version in sorted(await self._versions(name)):
                record = await self._broker_call(self._reader.version_record(name, version))
                if record is None:
                    continue
                live = await self._broker_call(self._readiness.live_workers(name, version))
                ready = version_ready(record.min_workers, live)
                if ready or not ready_only:
                    reason = "" if ready else f"{live} live worker(s), {max(1, record.min_workers)} needed"
                    entries.append(IndexEntry(name, version, "READY" if ready else "UNAVAILABLE", reason))
        return entries

    async def _versions(self, model: str) -> set[str]:
        names.check_model_name(model)
        _default, versions = await self._broker_call(self._reader.model_versions(model))
        if not versions:
            raise model_not_found(model)
        return versions

    async def _model_names(self) -> list[str]:
        return await self._broker_call(self._reader.model_names())

    @staticmethod
    async def _broker_call(call: Awaitable[T]) -> T:
        try:
            return await call
        except BrokerUnavailable as exc:
            raise SluiceError(ErrorCode.UNAVAILABLE, UNAVAILABLE_MESSAGE) from exc


def invalid_version(model: str) -> SluiceError:
    return SluiceError(ErrorCode.INVALID_ARGUMENT, f"Invalid model version for model '{model}'")


def _check_version_name(request: KServeRequest) -> None:
    if request.version and not names.is_valid(request.version):
        raise invalid_version(request.model)


def _earliest(*timeouts_s: float | None) -> float | None:
    given = [t for t in timeouts_s if t is not None]
    return min(given) if given else None
