"""A workflow's spec YAML as TorchServe 0.12 reads it (``WorkFlow.java``, ``Dag.java``), with a safe
loader: ``models`` holds the global settings (``min-workers``, ``max-workers``, ``batch-size``,
``max-batch-delay``, ``retry-attempts``, ``timeout-ms``) and one entry per model (``url`` plus any of
those settings); ``dag`` maps each node to its children. A node that is not a model is a function of
the workflow's handler file. The DAG must have exactly one start node and no cycle.

Pure: the archive is read elsewhere (:mod:`sluice_manager.models.workflow_archive`); errors are
TorchServe's (``InvalidDAGException`` texts) or, for what TorchServe would crash on, a message naming
the problem.
"""

from dataclasses import dataclass
from typing import Any

import yaml
from sluice.errors import ErrorCode, SluiceError
from sluice.registry import names
from sluice.registry.workflows import WorkflowNode, WorkflowRecord, member_model

INVALID_DAG = "org.pytorch.serve.ensemble.InvalidDAGException"
INVALID_WORKFLOW = "org.pytorch.serve.archive.workflow.InvalidWorkflowException"
SETTINGS = {
    "min-workers": "min_workers",
    "max-workers": "max_workers",
    "batch-size": "batch_size",
    "max-batch-delay": "max_batch_delay_ms",
    "retry-attempts": "retry_attempts",
    "timeout-ms": "timeout_ms",
}
MAX_SPEC_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Settings:
    """TorchServe's defaults (``WorkFlow`` fields)."""

    min_workers: int = 1
    max_workers: int = 1
    batch_size: int = 1
    max_batch_delay_ms: int = 50
    retry_attempts: int = 1
    timeout_ms: int = 10_000


@dataclass(frozen=True)
class Member:
    """How one node's member model is registered: a model archive (``url``, found in the model store)
    or a function of the handler file (``url`` empty)."""

    node: str
    model: str
    url: str
    settings: Settings


@dataclass(frozen=True)
class WorkflowSpec:
    record: WorkflowRecord
    members: list[Member]


def invalid_dag(message: str) -> SluiceError:
    return SluiceError(ErrorCode.INVALID_ARGUMENT, message, exception_class=INVALID_DAG)


def invalid_workflow(message: str) -> SluiceError:
    return SluiceError(ErrorCode.INVALID_ARGUMENT, message, exception_class=INVALID_WORKFLOW)


def parse_spec(workflow: str, url: str, text: bytes, *, registered_unix_ms: int = 0) -> WorkflowSpec:
    spec = _load(text)
    models = _mapping(spec.get("models"), "models")
    dag = _mapping(spec.get("dag"), "dag")
    defaults, model_settings = _models_settings(models)
    members: dict[str, Member] = {}
    edges: dict[str, list[str]] = {}
    for node, children in dag.items():
        _add(members, edges, workflow, _node_name(node), defaults, model_settings)
        for child in _children(node, children):
            _add(members, edges, workflow, child, defaults, model_settings)
            _add_edge(edges, _node_name(node), child)
    order = _validate(edges)
    parents = {name: [p for p in edges if name in edges[p]] for name in edges}
    nodes = [
        WorkflowNode(
            name=name,
            model=members[name].model,
            function=not members[name].url,
            parents=parents[name],
            children=list(edges[name]),
            timeout_ms=members[name].settings.timeout_ms,
            retry_attempts=members[name].settings.retry_attempts,
        )
        for name in edges
    ]
    record = WorkflowRecord(
        name=workflow,
        url=url,
        nodes=nodes,
        min_workers=defaults.min_workers,
        max_workers=defaults.max_workers,
        batch_size=defaults.batch_size,
        max_batch_delay_ms=defaults.max_batch_delay_ms,
        dag_text=java_map_text(dag),
        registered_unix_ms=registered_unix_ms,
    )
    return WorkflowSpec(record, [members[name] for name in order])


class _SpecLoader(yaml.SafeLoader):
    """YAML's safe loader without aliases: a few hundred bytes of nested aliases expand to gigabytes
    (TorchServe's SnakeYAML caps them too)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            raise yaml.composer.ComposerError("aliases are not allowed in a workflow spec")
        return super().compose_node(parent, index)


def _load(text: bytes) -> dict[Any, Any]:
    if len(text) > MAX_SPEC_BYTES:
        raise invalid_workflow("The workflow spec file is too large.")
    try:
        loaded = yaml.load(text, Loader=_SpecLoader)  # a safe loader, without aliases
    except yaml.YAMLError as exc:
        raise invalid_workflow(f"Failed to parse yaml: {_first_line(exc)}") from None
    if not isinstance(loaded, dict):
        raise invalid_workflow("The workflow spec must be a YAML mapping with `models` and `dag`.")
    return loaded


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _mapping(value: Any, section: str) -> dict[Any, Any]:
    if not isinstance(value, dict):
        raise invalid_workflow(f"The workflow spec needs a `{section}` mapping.")
    return value


def _integer(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise invalid_workflow(f"`{where}` in the workflow spec must be a whole number >= 0.")
    return value


def _models_settings(models: dict[Any, Any]) -> tuple[Settings, dict[str, tuple[str, Settings]]]:
    """The global settings as they stand after ``models``, and each model's url and settings: a model
    takes the global settings listed before it (TorchServe reads the section in order), then its own."""
    values: dict[str, int] = {}
    entries: dict[str, tuple[str, Settings]] = {}
    for key, value in models.items():
        if key in SETTINGS:
            values[SETTINGS[key]] = _integer(value, f"models.{key}")
        elif isinstance(value, dict):
            name = _node_name(key)
            url = value.get("url")
            if not isinstance(url, str) or not url:
                raise invalid_workflow(f"Model {name} of the workflow spec has no `url`.")
            entries[name] = (url, _member_settings(value, Settings(**values), name))
        else:
            raise invalid_workflow(
                f"`models.{key}` must be a model (a mapping with `url`) or a known setting."
            )
    return Settings(**values), entries


def _member_settings(entry: dict[Any, Any], defaults: Settings, model: str) -> Settings:
    values = dict(defaults.__dict__)
    for key, value in entry.items():
        if key in SETTINGS:
            values[SETTINGS[key]] = _integer(value, f"models.{model}.{key}")
    return Settings(**values)


def _node_name(node: Any) -> str:
    if isinstance(node, bool) or not isinstance(node, str | int):
        raise invalid_workflow("Workflow node names must be text.")
    name = str(node).strip()
    if not names.is_valid(name):
        raise invalid_workflow(
            f"Invalid workflow node name {names.printable(name)!r}: use letters, digits, '_', '-' and '.' "
            "(a node runs as the model <workflow>__<node>)"
        )
    return name


def _children(node: Any, children: Any) -> list[str]:
    if children is None:
        return []
    if not isinstance(children, list):
        raise invalid_workflow(f"`dag.{node}` must list the node's children.")
    return [_node_name(child) for child in children if child is not None and child != ""]


def _add(
    members: dict[str, Member],
    edges: dict[str, list[str]],
    workflow: str,
    node: str,
    defaults: Settings,
    model_settings: dict[str, tuple[str, Settings]],
) -> None:
    if node in members:
        return
    model = member_model(workflow, node)
    if not names.is_valid(model):
        raise invalid_workflow(f"Workflow member name {names.printable(model)!r} is too long.")
    if node in model_settings:
        url, settings = model_settings[node]
        members[node] = Member(node, model, url, settings)
    else:
        # A function of the handler file: TorchServe runs it with one worker, batch 1, no delay.
        settings = Settings(
            batch_size=1,
            max_batch_delay_ms=0,
            retry_attempts=defaults.retry_attempts,
            timeout_ms=defaults.timeout_ms,
        )
        members[node] = Member(node, model, "", settings)
    edges[node] = []


def _add_edge(edges: dict[str, list[str]], parent: str, child: str) -> None:
    """TorchServe's ``Dag.addEdge``: its "loop" check finds an edge listed twice (a cycle is found
    when the DAG is validated)."""
    if parent == child:
        raise invalid_dag("Self loop exception")
    if child in edges[parent]:
        raise invalid_dag("loop exception")
    edges[parent].append(child)


def _validate(edges: dict[str, list[str]]) -> list[str]:
    """The nodes in topological order; TorchServe's errors for several start nodes or a cycle."""
    in_degree = {name: 0 for name in edges}
    for children in edges.values():
        for child in children:
            in_degree[child] += 1
    ready = [name for name, degree in in_degree.items() if degree == 0]
    if len(ready) != 1:
        raise invalid_dag("DAG should have only one start node")
    order: list[str] = []
    while ready:
        name = ready.pop(0)
        order.append(name)
        for child in edges[name]:
            in_degree[child] -= 1
            if in_degree[child] == 0:
                ready.append(child)
    if len(order) != len(edges):
        raise invalid_dag("Not a valid DAG")
    return order


def java_map_text(value: Any) -> str:
    """``value`` as Java's ``toString`` prints the maps and lists SnakeYAML loads (DescribeWorkflow's
    ``workflowDag``): ``{pre=[m], m=[post]}``."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{java_map_text(k)}={java_map_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(java_map_text(item) for item in value) + "]"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
