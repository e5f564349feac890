"""The gateway's workflows, for every front: finding a registered workflow by name and running it."""

from collections.abc import AsyncGenerator
from contextlib import aclosing

from sluice.envelope import Reply
from sluice.errors import ErrorCode, SluiceError
from sluice.registry import names
from sluice.registry.workflows import WorkflowRecord

from sluice_gateway.dataplane import DataPlane
from sluice_gateway.registry_cache import RegistryCache
from sluice_gateway.workflows.answers import combined
from sluice_gateway.workflows.executor import WorkflowCall, WorkflowExecutor


def workflow_not_found(name: str) -> SluiceError:
    return SluiceError(ErrorCode.WORKFLOW_NOT_FOUND, f"Workflow not found: {names.printable(name)}")


class Workflows:
    def __init__(self, plane: DataPlane, cache: RegistryCache) -> None:
        self._executor = WorkflowExecutor(plane)
        self._cache = cache

    async def lookup(self, name: str) -> WorkflowRecord | None:
        """The registered workflow ``name``; None when there is none (the name may be a model's)."""
        return await self._cache.workflow(name) if names.is_valid(name) else None

    async def find(self, name: str) -> WorkflowRecord:
        """The registered workflow ``name``, or WORKFLOW_NOT_FOUND."""
        workflow = await self.lookup(name)
        if workflow is None:
            raise workflow_not_found(name)
        return workflow

    async def instead_of_model(self, error: SluiceError, name: str) -> WorkflowRecord:
        """The workflow a call naming ``name`` means when no model has that name (``error`` says
        so): a workflow is callable as a model of its name. Raises ``error`` when there is none."""
        if error.code is ErrorCode.MODEL_NOT_FOUND:
            workflow = await self.lookup(name)
            if workflow is not None:
                return workflow
        raise error

    async def answer(self, call: WorkflowCall) -> bytes:
        """The call's whole answer: the single leaf's output (its chunks joined, as a REST client
        reading the chunked answer gets it), or the leaves' JSON object."""
        if len(call.workflow.leaves) > 1:
            return combined(await self._executor.run(call))
        async with aclosing(self._executor.stream(call)) as replies:
            return b"".join([reply.payload async for reply in replies])

    def stream(self, call: WorkflowCall) -> AsyncGenerator[Reply, None]:
        """A single-leaf workflow's leaf replies as they come (:meth:`WorkflowExecutor.stream`)."""
        return self._executor.stream(call)

    async def chunks(self, call: WorkflowCall) -> AsyncGenerator[bytes, None]:
        """The call's answer for a streaming front: a single leaf's chunks as they come; the leaves'
        JSON object, whole, when there are several."""
        if len(call.workflow.leaves) > 1:
            yield combined(await self._executor.run(call))
            return
        async with aclosing(self._executor.stream(call)) as replies:
            async for reply in replies:
                yield reply.payload
