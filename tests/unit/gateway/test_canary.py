"""Traffic weights (a canary): the weighted choice itself, and the registry cache routing calls that name
no version by it, a sequence's calls to one version, and a sequence that lives on a version to that
version whatever the weights became."""

import itertools

import pytest
from sluice.errors import ErrorCode, SluiceError
from sluice.registry.reader import check_weights, choose_version, stable_draw, weighted_version
from sluice_gateway.broker.seam import SequenceStep
from sluice_gateway.registry_cache import RegistryCache

from tests.unit.gateway.fakes import FakeClusterReader, record

VERSIONS = frozenset({"1.0", "2.0", "3.0"})


def test_each_version_gets_its_share_of_the_draws() -> None:
    weights = {"1.0": 90, "2.0": 10}
    draws = [index / 1000 for index in range(1000)]
    chosen = [weighted_version(weights, VERSIONS, draw) for draw in draws]
    assert (chosen.count("1.0"), chosen.count("2.0")) == (900, 100)


def test_versions_without_weight_or_registration_get_nothing() -> None:
    assert weighted_version({"1.0": 0, "2.0": 5, "9.0": 50}, VERSIONS, 0.99) == "2.0"
    assert weighted_version({"9.0": 50}, VERSIONS, 0.5) is None


def test_a_named_version_ignores_the_weights_and_none_falls_back_to_the_default() -> None:
    weights = {"2.0": 1}
    assert choose_version("m", "3.0", "1.0", VERSIONS, weights, 0.5) == "3.0"
    assert choose_version("m", "", "1.0", VERSIONS, weights, 0.5) == "2.0"
    assert choose_version("m", "", "1.0", VERSIONS, {"9.0": 1}, 0.5) == "1.0"
    with pytest.raises(SluiceError) as raised:
        choose_version("m", "7.0", "1.0", VERSIONS, weights, 0.5)
    assert raised.value.code is ErrorCode.VERSION_NOT_FOUND


@pytest.mark.parametrize(
    ("weights", "problem"),
    [
        ({"1.0": -1}, "whole number from 0"),
        ({"1.0": 1.5}, "whole number from 0"),
        ({"1.0": True}, "whole number from 0"),
        ({"1.0": "90"}, "whole number from 0"),
        ({"1.0": 0, "2.0": 0}, "at least one version needs a weight above 0"),
    ],
)
def test_bad_weights_are_refused(weights: dict[str, object], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        check_weights(weights)


def test_a_sequence_id_draws_the_same_point_every_time() -> None:
    assert stable_draw("seq-1") == stable_draw("seq-1")
    draws = {stable_draw(f"seq-{index}") for index in range(200)}
    assert len(draws) == 200
    assert all(0 <= draw < 1 for draw in draws)


@pytest.fixture
def reader() -> FakeClusterReader:
    fake = FakeClusterReader()
    for version in ("1.0", "2.0"):
        fake.put(record(version=version), default=version == "1.0")
    fake.weights["echo"] = {"1.0": 75, "2.0": 25}
    return fake


async def test_calls_that_name_no_version_follow_the_weights(reader: FakeClusterReader) -> None:
    points = itertools.cycle([index / 100 for index in range(100)])
    cache = RegistryCache(reader, ttl_s=5.0, draw=lambda: next(points))
    chosen = [(await cache.resolve("echo", "")).version for _ in range(100)]
    assert (chosen.count("1.0"), chosen.count("2.0")) == (75, 25)
    assert {(await cache.resolve("echo", "2.0")).version for _ in range(10)} == {"2.0"}


async def test_a_sequence_stays_on_one_version(reader: FakeClusterReader) -> None:
    cache = RegistryCache(reader, ttl_s=5.0)
    for index in range(50):
        sequence_id = f"seq-{index}"
        first = (await cache.resolve("echo", "", SequenceStep(sequence_id, start=True))).version
        # Not yet live anywhere (the fake holds no sequence): the same draw, the same version.
        again = (await cache.resolve("echo", "", SequenceStep(sequence_id))).version
        assert again == first


async def test_a_live_sequence_keeps_its_version_when_the_weights_change(reader: FakeClusterReader) -> None:
    reader.sequences.add(("echo", "2.0", "held"))
    reader.weights["echo"] = {"1.0": 100}
    cache = RegistryCache(reader, ttl_s=5.0)
    assert (await cache.resolve("echo", "", SequenceStep("held"))).version == "2.0"
    assert (await cache.resolve("echo", "", SequenceStep("other"))).version == "1.0"
