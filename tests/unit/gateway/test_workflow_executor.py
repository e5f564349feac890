"""The workflow executor's DAG walk, driven through the data plane's in-memory seams: what each node's
job carries, in what order nodes run, retries, refusals, and the cancellation of nodes still running
when the call fails."""

import asyncio
from collections.abc import Callable

import pytest
from sluice.envelope import Job, WireProtocol
from sluice.errors import ErrorCode, SluiceError
from sluice.registry.workflows import WorkflowNode, WorkflowRecord
from sluice.v1.job_pb2 import NodeInput
from sluice_gateway.dataplane import DataPlane
from sluice_gateway.registry_cache import RegistryCache
from sluice_gateway.workflows.executor import NodeRequest, WorkflowCall, WorkflowExecutor

from tests.unit.gateway.fakes import FakeClusterReader, record
from tests.unit.gateway.in_memory_broker import InMemoryBroker

# A node's answer to one job (raise SluiceError to fail it).
Behaviour = Callable[[Job], bytes]


def node(name: str, parents: list[str], children: list[str], retries: int = 1) -> WorkflowNode:
    return WorkflowNode(
        name=name, model=f"wf__{name}", parents=parents, children=children, retry_attempts=retries
    )


# pre -> (a, b) -> join
FAN_IN = WorkflowRecord(
    name="wf",
    url="wf.war",
    nodes=[
        node("pre", [], ["a", "b"]),
        node("a", ["pre"], ["join"]),
        node("b", ["pre"], ["join"]),
        node("join", ["a", "b"], []),
    ],
)


def parameters(job: Job) -> list[tuple[str, bytes]]:
    assert job.protocol == WireProtocol.WORKFLOW_NODE
    return [(p.name, p.value) for p in NodeInput.FromString(job.request).parameters]


class Served:
    def __init__(self, workflow: WorkflowRecord) -> None:
        reader = FakeClusterReader()
        self.broker = InMemoryBroker()
        for member in workflow.members:
            reader.put(record(member))
            self.broker.admission.add_version(member, "1.0")
        self.executor = WorkflowExecutor(DataPlane(RegistryCache(reader, ttl_s=5.0), self.broker.admission,
                                                   self.broker.replies))  # fmt: skip
        self.workflow = workflow
        self.jobs: dict[str, list[Job]] = {}

    async def worker(self, member: str, behave: Behaviour, *, delay_s: float = 0.0) -> None:
        """Answer the member's jobs as they come, each after ``delay_s``."""
        while True:
            job = await self.broker.admission.take(member, "1.0")
            self.jobs.setdefault(member, []).append(job)
            await asyncio.sleep(delay_s)
            try:
                payload = behave(job)
            except SluiceError as error:
                self.broker.replies.send(job.job_id, final=True, status_code=error.http_status,
                                         message=error.message, error_code=error.code.value)  # fmt: skip
            else:
                self.broker.replies.send(job.job_id, final=True, status_code=200, payload=payload)

    def call(self, body: bytes = b"request") -> WorkflowCall:
        return WorkflowCall(self.workflow, NodeRequest(WireProtocol.TORCHSERVE_REST, body), {"X-Tag": "t"})


def echo_parameters(job: Job) -> bytes:
    return b"|".join(name.encode() + b"=" + value for name, value in parameters(job))


async def test_nodes_get_the_request_their_parents_outputs_and_the_headers() -> None:
    served = Served(FAN_IN)
    workers = [
        asyncio.create_task(served.worker("wf__pre", lambda job: b"pre(" + job.request + b")")),
        asyncio.create_task(served.worker("wf__a", echo_parameters, delay_s=0.05)),
        asyncio.create_task(served.worker("wf__b", echo_parameters)),
        asyncio.create_task(served.worker("wf__join", echo_parameters)),
    ]
    try:
        leaves = await served.executor.run(served.call())
    finally:
        for task in workers:
            task.cancel()
    # b answers before a: the fan-in node's parameters come in the order its parents answered.
    assert leaves == [("join", b"b=body=pre(request)|a=body=pre(request)")]
    root = served.jobs["wf__pre"][0]
    assert (root.protocol, root.request) == (WireProtocol.TORCHSERVE_REST, b"request")
    assert all(jobs[0].headers["X-Tag"] == "t" for jobs in served.jobs.values())


async def test_a_failed_attempt_is_retried_then_the_call_fails_with_torchserves_message() -> None:
    served = Served(
        WorkflowRecord(name="wf", url="wf.war", nodes=[node("pre", [], ["boom"]), node("boom", ["pre"], [])])
    )
    attempts = 0

    def flaky(job: Job) -> bytes:
        nonlocal attempts
        attempts += 1
        raise SluiceError(ErrorCode.HANDLER_FAILED, "boom")

    workers = [
        asyncio.create_task(served.worker("wf__pre", lambda job: b"x")),
        asyncio.create_task(served.worker("wf__boom", flaky)),
    ]
    try:
        with pytest.raises(SluiceError) as failed:
            await served.executor.run(served.call())
    finally:
        for task in workers:
            task.cancel()
    assert (failed.value.code, failed.value.message) == (ErrorCode.INTERNAL, "Error executing boom")
    assert attempts == 2  # retry-attempts 1: the first attempt and one retry


async def test_a_refusal_a_retry_cannot_mend_fails_the_call_at_once() -> None:
    served = Served(WorkflowRecord(name="wf", url="wf.war", nodes=[node("pre", [], [])]))
    served.broker.admission.versions[("wf__pre", "1.0")].workers = 0
    with pytest.raises(SluiceError) as refused:
        await served.executor.run(served.call())
    assert refused.value.code is ErrorCode.NO_WORKER


async def test_when_a_node_fails_the_nodes_still_running_are_cancelled() -> None:
    served = Served(FAN_IN)

    def refuse(job: Job) -> bytes:
        raise SluiceError(ErrorCode.INVALID_ARGUMENT, "bad input")

    workers = [
        asyncio.create_task(served.worker("wf__pre", lambda job: b"x")),
        asyncio.create_task(served.worker("wf__b", refuse, delay_s=0.05)),
    ]
    try:
        with pytest.raises(SluiceError) as failed:
            await served.executor.run(served.call())
        # a's job was queued (nobody serves it) and is flagged cancelled once b failed the call.
        a_jobs = served.broker.admission.jobs("wf__a", "1.0")
    finally:
        for task in workers:
            task.cancel()
    assert failed.value.code is ErrorCode.INVALID_ARGUMENT
    assert [flag.job_id for flag in served.broker.admission.cancelled] == [job.job_id for job in a_jobs]


async def test_a_client_that_leaves_mid_stream_cancels_the_leafs_job() -> None:
    served = Served(
        WorkflowRecord(name="wf", url="wf.war", nodes=[node("pre", [], ["talk"]), node("talk", ["pre"], [])])
    )
    pre = asyncio.create_task(served.worker("wf__pre", lambda job: b"x"))
    try:
        stream = served.executor.stream(served.call())
        first = asyncio.ensure_future(anext(stream))
        job = await served.broker.admission.take("wf__talk", "1.0")
        served.broker.replies.send(job.job_id, final=False, status_code=200, payload=b"chunk")
        assert (await first).payload == b"chunk"
        await stream.aclose()
    finally:
        pre.cancel()
    assert [flag.job_id for flag in served.broker.admission.cancelled] == [job.job_id]


async def test_an_attempt_that_times_out_is_retried_then_the_node_fails() -> None:
    slow = WorkflowNode(name="slow", model="wf__slow", timeout_ms=50, retry_attempts=1)
    served = Served(WorkflowRecord(name="wf", url="wf.war", nodes=[slow]))
    with pytest.raises(SluiceError) as failed:
        await served.executor.run(served.call())
    # Nobody answers: each of the two attempts timed out and was flagged cancelled.
    assert (failed.value.code, failed.value.message) == (ErrorCode.INTERNAL, "Error executing slow")
    assert len(served.broker.admission.jobs("wf__slow", "1.0")) == 2
    assert len(served.broker.admission.cancelled) == 2


async def test_the_calls_own_deadline_ends_it_with_deadline_exceeded() -> None:
    slow = WorkflowNode(name="slow", model="wf__slow", timeout_ms=10_000, retry_attempts=3)
    served = Served(WorkflowRecord(name="wf", url="wf.war", nodes=[slow]))
    call = WorkflowCall(served.workflow, NodeRequest(WireProtocol.TORCHSERVE_REST, b"x"), {}, timeout_s=0.05)
    with pytest.raises(SluiceError) as failed:
        await served.executor.run(call)
    assert failed.value.code is ErrorCode.DEADLINE_EXCEEDED
    assert len(served.broker.admission.jobs("wf__slow", "1.0")) == 1
