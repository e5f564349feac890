"""The system shared-memory extension as the gateway serves it: register, unregister and list regions
(kept in the broker, so every gateway of a cluster sees them), and a request's region names resolved
to the spans its job carries (``Job.shm_inputs`` / ``shm_outputs``) before it is enqueued.

The gateway checks a region against its object when it is registered, as Triton does; the worker
reads and writes the spans (it must share /dev/shm with the client: local process workers do, worker
containers have their own). Off unless ``sluice_system_shared_memory`` is on: a client that can
register a key can read and write that object with the server's rights.
"""

from collections.abc import Awaitable, Sequence
from typing import Protocol, TypeVar

from sluice.errors import ErrorCode, SluiceError
from sluice.kserve.shared_memory import Region, SharedMemoryError, check_region
from sluice.registry.workflows import WorkflowRecord
from sluice.v1.job_pb2 import SharedMemorySpan

from sluice_gateway.broker.seam import UNAVAILABLE_MESSAGE, BrokerUnavailable
from sluice_gateway.kserve.request import KServeRequest, SharedMemoryRef

T = TypeVar("T")
# The spans of a request's inputs and outputs in shared memory (Job.shm_inputs, Job.shm_outputs).
Spans = tuple[Sequence[SharedMemorySpan], Sequence[SharedMemorySpan]]
NO_SPANS: Spans = ((), ())

EXTENSION = "system_shared_memory"
DISABLED_MESSAGE = (
    "system shared memory is off on this server (set sluice_system_shared_memory=true where clients "
    "and workers share a host)"
)


class RegionStore(Protocol):
    """Where registered regions live (the broker; an in-memory fake in unit tests)."""

    async def add(self, region: Region) -> bool:
        """Keep ``region``; False (and nothing changed) when its name is taken."""
        ...

    async def remove(self, names: Sequence[str]) -> None:
        """Forget the regions named (every region when ``names`` is empty)."""
        ...

    async def find(self, names: Sequence[str]) -> dict[str, Region]:
        """The regions among ``names`` that are registered (every region when ``names`` is empty)."""
        ...


class SharedMemory:
    def __init__(self, store: RegionStore, *, enabled: bool) -> None:
        self._store = store
        self.enabled = enabled

    def _check_enabled(self) -> None:
        if not self.enabled:
            raise SluiceError(ErrorCode.NOT_IMPLEMENTED, DISABLED_MESSAGE)

    async def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        self._check_enabled()
        if not name:
            raise SluiceError(ErrorCode.INVALID_ARGUMENT, "a shared memory region needs a name")
        region = Region(name, key, offset, byte_size)
        try:
            check_region(region)
        except SharedMemoryError as exc:
            raise SluiceError(ErrorCode.INVALID_ARGUMENT, str(exc)) from None
        if not await _broker(self._store.add(region)):
            raise SluiceError(ErrorCode.CONFLICT, f"shared memory region '{name}' already in manager")

    async def unregister(self, name: str) -> None:
        """Forget region ``name`` (every region when it is empty); an unknown name is no error."""
        self._check_enabled()
        await _broker(self._store.remove([name] if name else []))

    async def status(self, name: str) -> list[Region]:
        """Region ``name`` (every region when it is empty), by name."""
        self._check_enabled()
        found = await _broker(self._store.find([name] if name else []))
        if name and name not in found:
            raise SluiceError(ErrorCode.NOT_FOUND, f"Unable to find system shared memory region: '{name}'")
        return sorted(found.values(), key=lambda region: region.name)

    async def spans(self, request: KServeRequest) -> Spans:
        """The spans of the request's inputs and outputs bound to regions, each within its region
        (none, without a read of the broker, for a request that names no region)."""
        if not request.uses_shared_memory:
            return NO_SPANS
        self._check_enabled()
        bound = [(t.name, t.shared_memory) for t in request.inputs if t.shared_memory is not None]
        wanted = [(o.name, o.shared_memory) for o in request.outputs if o.shared_memory is not None]
        regions = await _broker(self._store.find(sorted({ref.region for _name, ref in bound + wanted})))
        return (
            [_span(name, ref, regions) for name, ref in bound],
            [_span(name, ref, regions) for name, ref in wanted],
        )


def refuse_for_workflow(request: KServeRequest, workflow: WorkflowRecord) -> None:
    """A workflow's nodes run on workers of other versions: its tensors travel with the call."""
    if request.uses_shared_memory:
        raise SluiceError(
            ErrorCode.INVALID_ARGUMENT,
            f"workflow '{workflow.name}' takes no tensors in shared memory: send them in the request",
        )


async def _broker(call: Awaitable[T]) -> T:
    try:
        return await call
    except BrokerUnavailable as exc:
        raise SluiceError(ErrorCode.UNAVAILABLE, UNAVAILABLE_MESSAGE) from exc


def _span(tensor: str, ref: SharedMemoryRef, regions: dict[str, Region]) -> SharedMemorySpan:
    """Triton's checks and messages (shared_memory_manager.cc, GetMemoryInfo)."""
    region = regions.get(ref.region)
    if region is None:
        raise SluiceError(ErrorCode.NOT_FOUND, f"Unable to find shared memory region: '{ref.region}'")
    if ref.offset >= max(region.byte_size, 1):
        raise SluiceError(
            ErrorCode.INVALID_ARGUMENT, f"Invalid offset for shared memory region: '{ref.region}'"
        )
    if ref.offset + ref.byte_size > region.byte_size:
        raise SluiceError(
            ErrorCode.INVALID_ARGUMENT, f"Invalid offset + byte size for shared memory region: '{ref.region}'"
        )
    return SharedMemorySpan(
        tensor=tensor, key=region.key, offset=region.offset + ref.offset, byte_size=ref.byte_size
    )
