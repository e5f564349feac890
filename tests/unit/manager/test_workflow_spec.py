"""Workflow specs read as TorchServe 0.12 reads them (WorkFlow.java, Dag.java), with a safe loader."""

import pytest
from sluice.errors import ErrorCode, SluiceError
from sluice_manager.models.workflow_spec import java_map_text, parse_spec

SPEC = b"""
models:
  min-workers: 2
  max-workers: 3
  batch-size: 4
  max-batch-delay: 20
  retry-attempts: 2
  timeout-ms: 500
  cnn:
    url: cnn.mar
    batch-size: 8
dag:
  pre: [cnn, side]
  cnn: [post]
  side: [post]
"""


def test_models_nodes_edges_and_settings() -> None:
    spec = parse_spec("pipe", "pipe.war", SPEC)
    record = spec.record
    assert [n.name for n in record.nodes] == ["pre", "cnn", "side", "post"]
    assert [n.model for n in record.nodes] == ["pipe__pre", "pipe__cnn", "pipe__side", "pipe__post"]
    assert record.node("post").parents == ["cnn", "side"]
    assert record.node("pre").children == ["cnn", "side"]
    assert (record.root.name, [leaf.name for leaf in record.leaves]) == ("pre", ["post"])
    assert (record.min_workers, record.max_workers, record.batch_size, record.max_batch_delay_ms) == (
        2,
        3,
        4,
        20,
    )
    assert record.dag_text == "{pre=[cnn, side], cnn=[post], side=[post]}"
    members = {m.node: m for m in spec.members}
    # A model node takes the global settings and its own overrides.
    assert members["cnn"].url == "cnn.mar"
    assert (members["cnn"].settings.batch_size, members["cnn"].settings.max_workers) == (8, 3)
    # A function node runs with batch 1, no delay, the global timeout and retries.
    assert members["pre"].url == ""
    assert (members["pre"].settings.batch_size, members["pre"].settings.max_batch_delay_ms) == (1, 0)
    assert (record.node("pre").timeout_ms, record.node("pre").retry_attempts) == (500, 2)
    assert record.node("pre").function
    assert not record.node("cnn").function
    # Registered parents first.
    assert [m.node for m in spec.members] == ["pre", "cnn", "side", "post"]


def test_defaults_are_torchserves() -> None:
    record = parse_spec("w", "w.war", b"models: {}\ndag:\n  a: [b]\n").record
    assert (record.min_workers, record.max_workers, record.batch_size, record.max_batch_delay_ms) == (
        1,
        1,
        1,
        50,
    )
    assert (record.node("a").timeout_ms, record.node("a").retry_attempts) == (10_000, 1)


@pytest.mark.parametrize(
    ("dag", "message"),
    [
        (b"dag:\n  a: [a]\n", "Self loop exception"),
        # TorchServe's "loop" check finds an edge listed twice; a two-node cycle has no start node.
        (b"dag:\n  a: [b, b]\n", "loop exception"),
        (b"dag:\n  a: [b]\n  b: [a]\n", "DAG should have only one start node"),
        (b"dag:\n  a: [c]\n  b: [c]\n", "DAG should have only one start node"),
        (b"dag:\n  a: [b]\n  b: [c]\n  c: [d]\n  d: [b]\n", "Not a valid DAG"),
    ],
)
def test_invalid_dags_get_torchserves_invalid_dag_errors(dag: bytes, message: str) -> None:
    with pytest.raises(SluiceError) as refused:
        parse_spec("w", "w.war", b"models: {}\n" + dag)
    assert (refused.value.code, refused.value.message) == (ErrorCode.INVALID_ARGUMENT, message)
    assert refused.value.exception_class.endswith("InvalidDAGException")


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        (b"models: {}\ndag:\n  a: !!python/object/apply:os.system ['true']\n", "Failed to parse yaml"),
        (b"[1, 2]", "mapping"),
        (b"models: {}\n", "`dag`"),
        (b"models:\n  m: {batch-size: 4}\ndag:\n  m: [x]\n", "no `url`"),
        (b"models:\n  batch-size: two\ndag:\n  a: [b]\n", "models.batch-size"),
        (b"models: {}\ndag:\n  'a b': [c]\n", "Invalid workflow node name"),
        (b"models: {}\ndag:\n  a: b\n", "must list the node's children"),
        # Nested aliases would expand to gigabytes: refused before anything expands.
        (b"models: {}\nx: &a [1, 1]\ny: &b [*a, *a]\ndag:\n  a: *b\n", "aliases are not allowed"),
        (b"models: {}\ndag:\n  a: [{x: 1}]\n", "node names must be text"),
    ],
)
def test_specs_torchserve_would_crash_on_get_a_message_naming_the_problem(spec: bytes, named: str) -> None:
    with pytest.raises(SluiceError) as refused:
        parse_spec("w", "w.war", spec)
    assert refused.value.code is ErrorCode.INVALID_ARGUMENT
    assert named in refused.value.message


def test_a_model_takes_the_global_settings_listed_before_it() -> None:
    spec = parse_spec(
        "w", "w.war", b"models:\n  m: {url: m.mar}\n  batch-size: 4\n  n: {url: n.mar}\ndag:\n  m: [n]\n"
    )
    sizes = {member.node: member.settings.batch_size for member in spec.members}
    assert (sizes, spec.record.batch_size) == ({"m": 1, "n": 4}, 4)


def test_java_map_text_prints_as_java_does() -> None:
    assert java_map_text({"a": ["b", "c"], "b": None, "c": []}) == "{a=[b, c], b=null, c=[]}"
