"""Registered workflows (TorchServe ``.war`` archives, docs/workflows.md): the DAG a gateway walks and
the member models its nodes run on. The manager writes them through
:class:`sluice.registry.store.RegistryStore`; gateways read them here.

A workflow's record lives in one hash (:data:`sluice.redis.keys.WORKFLOWS`, name -> JSON); its member
models are ordinary model versions named ``<workflow>__<node>``, as TorchServe names them.
"""

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sluice.redis import keys
from sluice.typed import Checked

if TYPE_CHECKING:
    from sluice.registry.reader import AnyRedis

# TorchServe's separator between a workflow's name and a node's in its member models' names.
MEMBER_SEPARATOR = "__"


def member_model(workflow: str, node: str) -> str:
    return f"{workflow}{MEMBER_SEPARATOR}{node}"


@dataclass(frozen=True, kw_only=True)
class WorkflowNode(Checked):
    """One node of the DAG: a model from the spec's ``models`` or a function of the workflow's handler
    file, each run as the member model ``model``."""

    name: str
    model: str
    function: bool = False
    # Parents in the order the spec lists their edges, children likewise.
    parents: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    # How long one attempt may take, and the attempts after the first (spec `timeout-ms`,
    # `retry-attempts`).
    timeout_ms: int = 10_000
    retry_attempts: int = 1


@dataclass(frozen=True, kw_only=True)
class WorkflowRecord(Checked):
    name: str
    # The archive as the client named it (TorchServe's workflowUrl).
    url: str
    # In the spec's order; exactly one has no parent (the root).
    nodes: list[WorkflowNode]
    # The spec's global `models` settings, as DescribeWorkflow shows them.
    min_workers: int = 1
    max_workers: int = 1
    batch_size: int = 1
    max_batch_delay_ms: int = 50
    # The spec's `dag` as TorchServe prints it (a Java map: ``{pre=[m], m=[post]}``).
    dag_text: str = ""
    registered_unix_ms: int = 0

    @property
    def root(self) -> WorkflowNode:
        return next(node for node in self.nodes if not node.parents)

    @property
    def leaves(self) -> list[WorkflowNode]:
        return [node for node in self.nodes if not node.children]

    def node(self, name: str) -> WorkflowNode:
        return next(node for node in self.nodes if node.name == name)

    @property
    def members(self) -> list[str]:
        return [node.model for node in self.nodes]


async def get_workflow(redis: "AnyRedis", name: str) -> WorkflowRecord | None:
    raw = await redis.hget(keys.WORKFLOWS, name)
    return None if raw is None else WorkflowRecord.from_json(raw)


async def workflow_names(redis: "AnyRedis") -> list[str]:
    """Every registered workflow's name, sorted."""
    raw = await redis.hkeys(keys.WORKFLOWS)
    return sorted(name.decode() if isinstance(name, bytes) else name for name in raw)
