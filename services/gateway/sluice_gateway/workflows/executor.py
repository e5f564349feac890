"""Running a workflow's DAG for one call, as TorchServe's ``DagExecutor`` does: every node whose parents
have all answered is sent as an ordinary job of its member model (its own stream, batching and
workers), concurrently with the other ready nodes; a node with one parent gets the parent's output as
parameter ``body``, a node with several gets one parameter per parent, named after it, in the order
they answered; every node gets the call's headers. The root gets the call's own request.

A node's attempt is bounded by its ``timeout-ms`` (and by the call's deadline, if it has one); a
failed attempt (handler error, dead worker, timeout) is retried ``retry-attempts`` times, then the call
fails with TorchServe's ``Error executing <node>``. Refusals that a retry cannot mend (no worker, a
full queue, the broker down, the call's own deadline) fail the call at once with their own error. When
the call fails or its client goes away, the nodes still running are cancelled (their jobs flagged, as
any cancelled call's are).
"""

import asyncio
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from contextlib import aclosing
from dataclasses import dataclass

from sluice.envelope import Reply, WireProtocol
from sluice.errors import ErrorCode, SluiceError
from sluice.log import get_logger
from sluice.registry.workflows import WorkflowNode, WorkflowRecord
from sluice.v1.job_pb2 import NodeInput, NodeParameter

from sluice_gateway.dataplane import DataPlane, InferenceCall

log = get_logger(__name__)

# Failures of one attempt that another attempt may not repeat.
RETRIED = frozenset({ErrorCode.HANDLER_FAILED, ErrorCode.WORKER_DIED, ErrorCode.DEADLINE_EXCEEDED})
CALL_DEADLINE_MESSAGE = "The workflow call's deadline passed"


@dataclass(frozen=True, slots=True)
class NodeRequest:
    """A node's job request in one wire protocol (the root's may come in any; the others are
    ``WORKFLOW_NODE``)."""

    protocol: "WireProtocol.ValueType"
    request: bytes


@dataclass(frozen=True)
class WorkflowCall:
    workflow: WorkflowRecord
    root: NodeRequest
    headers: Mapping[str, str]
    # The client's deadline; None: each node's timeout alone bounds the call.
    timeout_s: float | None = None


def node_request(parameters: list[tuple[str, bytes]]) -> NodeRequest:
    """Parameters as a parent's outputs are handed on: bytes, no content type."""
    node_input = NodeInput(parameters=[NodeParameter(name=name, value=value) for name, value in parameters])
    return NodeRequest(WireProtocol.WORKFLOW_NODE, node_input.SerializeToString())


def workflow_call(
    workflow: WorkflowRecord, parameters: list[tuple[str, bytes]], timeout_s: float | None
) -> WorkflowCall:
    """A call from a front other than ``/wfpredict`` (TorchServe gRPC's inputs, a KServe v2 BYTES
    input): the root gets ``parameters`` as a parent's outputs are handed on (bytes, no content type)."""
    return WorkflowCall(workflow, node_request(parameters), headers={}, timeout_s=timeout_s)


def node_failed(node: str) -> SluiceError:
    """What TorchServe answers once a node's attempts are spent."""
    return SluiceError(ErrorCode.INTERNAL, f"Error executing {node}")


class WorkflowExecutor:
    def __init__(self, plane: DataPlane, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._plane = plane
        self._clock = clock

    async def run(self, call: WorkflowCall) -> list[tuple[str, bytes]]:
        """Every leaf's output, in the order the leaves answered."""
        outputs, _held = await self._walk(call, hold=None, deadline=self._deadline(call))
        return outputs

    async def stream(self, call: WorkflowCall) -> AsyncGenerator[Reply, None]:
        """The replies of a single-leaf workflow's leaf as they come (chunks, then the final one),
        the nodes before it run as in :meth:`run`."""
        (leaf,) = call.workflow.leaves
        deadline = self._deadline(call)
        _outputs, held = await self._walk(call, hold=leaf.name, deadline=deadline)
        request = held if held is not None else call.root
        # Closed with this generator, so that a client that leaves mid-stream cancels the leaf's job.
        async with aclosing(self._stream_node(call, leaf, request, deadline)) as replies:
            async for reply in replies:
                yield reply

    def _deadline(self, call: WorkflowCall) -> float | None:
        return None if call.timeout_s is None else self._clock() + call.timeout_s

    async def _walk(
        self, call: WorkflowCall, *, hold: str | None, deadline: float | None
    ) -> tuple[list[tuple[str, bytes]], NodeRequest | None]:
        """Run the DAG; the node ``hold`` is not run but its request returned once its parents
        answered (None when ``hold`` is the root)."""
        workflow = call.workflow
        root = workflow.root
        if root.name == hold:
            return [], None
        inputs: dict[str, list[tuple[str, bytes]]] = {}
        leaves: list[tuple[str, bytes]] = []
        held: NodeRequest | None = None
        running: dict[asyncio.Task[bytes], WorkflowNode] = {}

        def launch(node: WorkflowNode, request: NodeRequest) -> None:
            task = asyncio.create_task(
                self._run_node(call, node, request, deadline), name=f"node-{node.name}"
            )
            running[task] = node

        launch(root, call.root)
        try:
            while running:
                done, _pending = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    node = running.pop(task)
                    output = task.result()
                    if not node.children:
                        leaves.append((node.name, output))
                    for child_name in node.children:
                        child = workflow.node(child_name)
                        parameters = inputs.setdefault(child_name, [])
                        parameters.append(("body" if len(child.parents) == 1 else node.name, output))
                        if len(parameters) < len(child.parents):
                            continue
                        if child_name == hold:
                            held = node_request(parameters)
                        else:
                            launch(child, node_request(parameters))
        finally:
            for task in running:
                task.cancel()
            if running:
                await asyncio.gather(*running, return_exceptions=True)
        return leaves, held

    def _attempt_timeout_s(self, node: WorkflowNode, deadline: float | None) -> float:
        timeout_s = node.timeout_ms / 1000
        if deadline is None:
            return timeout_s
        left_s = deadline - self._clock()
        if left_s <= 0:
            raise SluiceError(ErrorCode.DEADLINE_EXCEEDED, CALL_DEADLINE_MESSAGE)
        return min(timeout_s, left_s)

    def _inference_call(
        self, call: WorkflowCall, node: WorkflowNode, request: NodeRequest, timeout_s: float
    ) -> InferenceCall:
        return InferenceCall(
            protocol=request.protocol,
            model=node.model,
            version="",
            request=request.request,
            timeout_s=timeout_s,
            headers=call.headers,
            stream_in_batch=True,
            # A stateful member starts a new sequence per call, as a REST call naming none does.
            missing_sequence=None,
        )

    def _give_up(self, node: WorkflowNode, error: SluiceError, attempt: int, deadline: float | None) -> bool:
        """Whether a failed attempt ends the call (else it is retried)."""
        past_deadline = deadline is not None and self._clock() >= deadline
        log.warning("workflow node attempt failed", node=node.name, member=node.model, attempt=attempt,
                    error=error.message, code=error.code.value)  # fmt: skip
        return error.code not in RETRIED or past_deadline

    async def _run_node(
        self, call: WorkflowCall, node: WorkflowNode, request: NodeRequest, deadline: float | None
    ) -> bytes:
        attempts = 1 + max(node.retry_attempts, 0)
        for attempt in range(attempts):
            timeout_s = self._attempt_timeout_s(node, deadline)
            try:
                reply = await self._plane.infer(self._inference_call(call, node, request, timeout_s))
            except SluiceError as error:
                if self._give_up(node, error, attempt, deadline):
                    raise _calls_error(error, deadline, self._clock()) from None
                continue
            return reply.payload
        raise node_failed(node.name)

    async def _stream_node(
        self, call: WorkflowCall, node: WorkflowNode, request: NodeRequest, deadline: float | None
    ) -> AsyncGenerator[Reply, None]:
        """A leaf's replies; an attempt that fails before its first reply is retried as any node's."""
        attempts = 1 + max(node.retry_attempts, 0)
        for attempt in range(attempts):
            timeout_s = self._attempt_timeout_s(node, deadline)
            answered = False
            try:
                stream = self._plane.infer_stream(self._inference_call(call, node, request, timeout_s))
                async with aclosing(stream) as replies:
                    async for reply in replies:
                        answered = True
                        yield reply
                return
            except SluiceError as error:
                if answered:
                    raise
                if self._give_up(node, error, attempt, deadline):
                    raise _calls_error(error, deadline, self._clock()) from None
        raise node_failed(node.name)


def _calls_error(error: SluiceError, deadline: float | None, now: float) -> SluiceError:
    """A node's error as the call's: a retriable failure past the call's deadline is the deadline's."""
    if deadline is not None and now >= deadline and error.code in RETRIED:
        return SluiceError(ErrorCode.DEADLINE_EXCEEDED, CALL_DEADLINE_MESSAGE)
    return error
