"""The registry cache over the broker's ClusterReader: resolution, TTL, invalidation, negative caching,
shared loads."""

import asyncio

import pytest
from sluice.errors import ErrorCode, SluiceError
from sluice_gateway.broker.registry_events import event_model
from sluice_gateway.registry_cache import RegistryCache

from tests.support.eventually import eventually
from tests.unit.gateway.fakes import FakeClusterReader, record


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def reader() -> FakeClusterReader:
    fake = FakeClusterReader()
    fake.put(record(version="1.0"))
    fake.put(record(version="2.0", response_timeout_s=7), default=False)
    return fake


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def cache(reader: FakeClusterReader, clock: Clock) -> RegistryCache:
    return RegistryCache(reader, ttl_s=5.0, clock=clock)


async def test_resolves_default_and_explicit_versions(cache: RegistryCache) -> None:
    assert (await cache.resolve("echo", "")).version == "1.0"
    resolved = await cache.resolve("echo", "2.0")
    assert (resolved.version, resolved.response_timeout_s) == ("2.0", 7)


@pytest.mark.parametrize(
    ("model", "version", "code", "message"),
    [
        ("nope", "", ErrorCode.MODEL_NOT_FOUND, "Model not found: nope"),
        ("nope", "1.0", ErrorCode.MODEL_NOT_FOUND, "Model not found: nope"),
        ("echo", "9.9", ErrorCode.VERSION_NOT_FOUND, "Model version: 9.9 does not exist for model: echo"),
    ],
)
async def test_not_found_errors(
    cache: RegistryCache, model: str, version: str, code: ErrorCode, message: str
) -> None:
    with pytest.raises(SluiceError) as caught:
        await cache.resolve(model, version)
    assert (caught.value.code, caught.value.message) == (code, message)


async def test_hits_are_served_from_memory_until_the_ttl(
    cache: RegistryCache, reader: FakeClusterReader, clock: Clock
) -> None:
    await cache.resolve("echo", "")
    reads = reader.reads
    await cache.resolve("echo", "")
    assert reader.reads == reads
    clock.now += 5.1
    await cache.resolve("echo", "")
    assert reader.reads == reads + 2


async def test_unknown_models_are_cached_too(cache: RegistryCache, reader: FakeClusterReader) -> None:
    for _ in range(3):
        with pytest.raises(SluiceError):
            await cache.resolve("nope", "")
    assert reader.reads == 1


async def test_invalidation_picks_up_a_new_default(cache: RegistryCache, reader: FakeClusterReader) -> None:
    await cache.resolve("echo", "")
    reader.put(record(version="2.0"), default=True)
    assert (await cache.resolve("echo", "")).version == "1.0"
    cache.invalidate("echo")
    assert (await cache.resolve("echo", "")).version == "2.0"
    reader.put(record(version="1.0"), default=True)
    cache.invalidate()
    assert (await cache.resolve("echo", "")).version == "1.0"


async def test_concurrent_misses_share_one_load(cache: RegistryCache, reader: FakeClusterReader) -> None:
    reader.gate = asyncio.Event()
    calls = [asyncio.ensure_future(cache.resolve("echo", "")) for _ in range(10)]
    await asyncio.sleep(0)
    reader.gate.set()
    assert {r.version for r in await asyncio.gather(*calls)} == {"1.0"}
    assert reader.reads == 2  # one model read, one record read


async def test_a_load_that_raced_an_invalidation_is_not_stored(
    cache: RegistryCache, reader: FakeClusterReader
) -> None:
    reader.gate = asyncio.Event()
    call = asyncio.ensure_future(cache.resolve("echo", ""))
    await eventually(lambda: reader.reads == 1, interval_s=0)
    cache.invalidate("echo")
    reader.gate.set()
    await call
    reads = reader.reads
    await cache.resolve("echo", "")
    assert reader.reads > reads


async def test_a_broker_down_is_unavailable(cache: RegistryCache, reader: FakeClusterReader) -> None:
    reader.down = True
    with pytest.raises(SluiceError) as caught:
        await cache.resolve("echo", "")
    assert caught.value.code is ErrorCode.UNAVAILABLE


@pytest.mark.parametrize(
    ("data", "model"),
    [
        (b'{"kind": "registered", "model": "echo", "version": "1.0"}', "echo"),
        ('{"kind": "default", "model": "m"}', "m"),
        (b"not json", None),
        (b'["a"]', None),
        (b'{"model": ""}', None),
    ],
)
def test_event_model(data: bytes | str, model: str | None) -> None:
    assert event_model(data) == model
