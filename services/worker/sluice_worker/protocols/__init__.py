"""Everything that depends on the wire protocol a job came in through (``Job.protocol``): one adapter
per protocol (:class:`~.base.WireAdapter`) in one table. A new protocol is one module and one entry.

Rows are built in TorchServe's decoded-request form, which ``ts.service.Service.predict`` turns into
the handler's ``data`` list and the per-row request headers (see docs/design.md, "Contracts").
"""

from sluice.envelope import Job, WireProtocol
from sluice.errors import ErrorCode, SluiceError
from sluice.kserve.declaration import ModelTensors

from sluice_worker.protocols.base import TsRequest, WireAdapter
from sluice_worker.protocols.describe import Describe
from sluice_worker.protocols.kserve import KServe
from sluice_worker.protocols.torchserve_grpc import TorchServeGrpc
from sluice_worker.protocols.torchserve_rest import TorchServeRest
from sluice_worker.protocols.workflow_node import WorkflowNode

NO_TENSORS = ModelTensors()

__all__ = ["NO_TENSORS", "Protocols", "TsRequest"]


class Protocols:
    """The adapters of one worker: its model's KServe v2 declaration (v2 rows and replies depend on
    it) and TorchServe's ``decode_input_request`` (REST bodies reach handlers decoded or not)."""

    def __init__(self, tensors: ModelTensors = NO_TENSORS, *, decode_input_request: bool = True) -> None:
        # Keyed by plain ints: reading a protobuf enum's value off its wrapper goes through a Python
        # __getattr__, and the look-up runs for every job.
        self._adapters: dict[int, WireAdapter] = {
            int(WireProtocol.TORCHSERVE_GRPC): TorchServeGrpc(),
            int(WireProtocol.TORCHSERVE_REST): TorchServeRest(decode=decode_input_request),
            int(WireProtocol.KSERVE): KServe(tensors),
            int(WireProtocol.DESCRIBE): Describe(),
            int(WireProtocol.WORKFLOW_NODE): WorkflowNode(decode=decode_input_request),
        }

    def _adapter(self, job: Job) -> WireAdapter:
        adapter = self._adapters.get(job.protocol)
        if adapter is None:
            raise SluiceError(ErrorCode.INTERNAL, f"This worker does not serve {_name(job.protocol)} jobs.")
        return adapter

    def handler_request(self, job: Job, request: bytes | memoryview | None = None) -> TsRequest:
        """The TorchServe request for ``job`` (request id = job id), or the error it deserves.
        ``request``: the job's request when it is not the Job's own (a large job's, split off)."""
        parameters, extra_headers = self._adapter(job).row(job, job.request if request is None else request)
        headers = {**extra_headers, **job.headers}
        return {
            "requestId": job.job_id.encode("utf-8"),
            "parameters": parameters,
            "headers": [
                {"name": key.encode("utf-8"), "value": value.encode("utf-8")}
                for key, value in headers.items()
            ],
        }

    def join(self, job: Job, bodies: list[bytes]) -> bytes:
        """One result body from the chunks of a generative model's answer (``Job.final_only``)."""
        return self._adapter(job).join(job, bodies)

    def reply_payload(self, job: Job, body: bytes) -> bytes:
        """What the gateway sends the client for one result body of ``job``; raises SluiceError when
        the body cannot be one (a v2 result that is neither v2 JSON nor tensors)."""
        return self._adapter(job).payload(job, body)


def _name(value: int) -> str:
    try:
        return WireProtocol.Name(value)  # type: ignore[arg-type]
    except ValueError:
        return f"protocol {value}"
