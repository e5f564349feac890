"""Typed dataclasses from loose values: conversions, bounds, nested records, JSON round trips."""

import dataclasses
import enum
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest
from sluice.kserve.declaration import ModelTensors, TensorSpec
from sluice.registry.records import VersionRecord, WorkerRecord, WorkerStatus
from sluice.typed import Bounds, Checked, InvalidValue, Port, PositiveInt, build, convert


class Color(enum.StrEnum):
    RED = "red"
    BLUE = "blue"


@dataclass(frozen=True, kw_only=True)
class Inner(Checked):
    name: Annotated[str, Bounds(pattern=r"[a-z]+")]
    size: PositiveInt = 1


@dataclass(frozen=True, kw_only=True)
class Outer(Checked):
    port: Port
    ratio: float = 0.5
    color: Color = Color.RED
    mode: Literal["fast", "slow"] = "fast"
    where: Path | None = None
    items: tuple[Inner, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    def check(self) -> None:
        if self.mode == "slow" and self.ratio > 1:
            raise InvalidValue("", "a slow mode needs ratio <= 1")


@pytest.mark.parametrize(
    ("value", "hint", "expected"),
    [
        ("8", int, 8),
        (" 8 ", int, 8),
        (8.0, int, 8),
        ("2.5", float, 2.5),
        (3, float, 3.0),
        ("yes", bool, True),
        ("OFF", bool, False),
        (1, bool, True),
        ("/srv", Path, Path("/srv")),
        (None, int | None, None),
        ("4", int | None, 4),
        ([1, "2"], tuple[int, ...], (1, 2)),
        ("blue", Color, Color.BLUE),
    ],
)
def test_loose_values_convert(value: object, hint: object, expected: object) -> None:
    converted = convert(value, hint, "x")
    assert converted == expected
    assert type(converted) is type(expected)


@pytest.mark.parametrize(
    ("value", "hint", "problem"),
    [
        ("2.5", int, "must be an integer (got '2.5')"),
        (2.5, int, "must be an integer (got 2.5)"),
        (True, int, "must be an integer (got True)"),
        ("maybe", bool, "must be true or false (got 'maybe')"),
        ("fast", float, "must be a number (got 'fast')"),
        (3, str, "must be a string (got 3)"),
        ("green", Color, "must be one of red, blue (got 'green')"),
        ("x", Literal["a", "b"], "must be one of a, b (got 'x')"),
        (0, PositiveInt, "must be > 0 (got 0)"),
        (70000, Port, "must be <= 65535 (got 70000)"),
        ("1", tuple[int, ...], "must be a list (got '1')"),
    ],
)
def test_bad_values_are_refused_with_the_reason(value: object, hint: object, problem: str) -> None:
    with pytest.raises(InvalidValue) as refused:
        convert(value, hint, "x")
    assert (refused.value.where, refused.value.problem) == ("x", problem)


def refusal(make: Callable[[], object]) -> str:
    with pytest.raises(InvalidValue) as refused:
        make()
    return str(refused.value)


def test_the_constructor_converts_and_checks_every_field() -> None:
    outer = Outer(port="80", items=[{"name": "ab", "size": "2"}], where="/tmp")  # type: ignore[arg-type]
    assert outer.port == 80
    assert outer.items == (Inner(name="ab", size=2),)
    assert outer.where == Path("/tmp")
    bad_item = [{"name": "ab"}, {"name": "A}"}]
    assert refusal(lambda: Outer(port=80, items=bad_item)) == (  # type: ignore[arg-type]
        "items.1.name: must match [a-z]+ (got 'A}')"
    )
    assert refusal(lambda: Outer(port=80, mode="slow", ratio=2)) == "a slow mode needs ratio <= 1"
    assert refusal(lambda: dataclasses.replace(Outer(port=80), port=65536)) == (
        "port: must be <= 65535 (got 65536)"
    )


def test_json_round_trip_ignores_unknown_keys_and_names_missing_ones() -> None:
    outer = Outer(port=1, color=Color.BLUE, where=Path("/m"), items=(Inner(name="a"),), extra={"k": [1]})
    data = json.loads(outer.to_json())
    assert (data["color"], data["where"]) == ("blue", "/m")
    assert data["items"] == [{"name": "a", "size": 1}]
    assert Outer.from_json(json.dumps({**data, "added_later": True})) == outer
    assert refusal(lambda: Outer.from_json("{}")) == "port: is required"
    assert (
        refusal(lambda: Outer.from_json('{"port": 1, "items": [3]}')) == "items.0: must be an object (got 3)"
    )
    assert refusal(lambda: Outer.from_json(b"{")).startswith("not JSON: ")
    assert refusal(lambda: Outer.from_json("[]")) == "must be an object (got [])"


def test_records_round_trip() -> None:
    tensors = ModelTensors(inputs=(TensorSpec(name="x", datatype="FP32", shape=(-1, 3)),), max_batch_size=4)
    record = VersionRecord(
        model_name="m", version="1", model_url="m.mar", model_dir="/d", handler="h.py", tensors=tensors
    )
    assert VersionRecord.from_json(record.to_json()) == record
    assert build(VersionRecord, json.loads(record.to_json()), "").tensors.inputs[0].shape == (-1, 3)
    worker = WorkerRecord(worker_id="9000", pid=1, host="h", status=WorkerStatus.READY, started_unix_ms=0)
    assert WorkerRecord.from_json(worker.to_json()).status is WorkerStatus.READY


def test_mutable_defaults_are_not_shared() -> None:
    first, second = Outer(port=1), Outer(port=2)
    first.extra["k"] = 1
    assert second.extra == {}
