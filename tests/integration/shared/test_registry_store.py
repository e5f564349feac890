"""The registry's one writer, against a real Redis: every change comes with its event, and a
subscriber that hears the event reads the change."""

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from sluice.redis import keys
from sluice.registry import reader as registry
from sluice.registry.records import VersionRecord
from sluice.registry.store import RegistryStore


def version(number: str, **changes: object) -> VersionRecord:
    fields: dict[str, object] = {"model_name": "m", "version": number, "model_url": "m.mar",
                                 "model_dir": "/models/x", "handler": "h.py", **changes}  # fmt: skip
    return VersionRecord(**fields)  # type: ignore[arg-type]


Heard = tuple[dict[str, str], object]


@pytest.fixture
async def events(
    redis_client: "aioredis.Redis",
) -> AsyncIterator["asyncio.Queue[Heard]"]:
    """Each registry event, with what the registry held when the event was heard."""
    heard: asyncio.Queue[Heard] = asyncio.Queue()
    reader = aioredis.Redis(connection_pool=redis_client.connection_pool)

    async def listen() -> None:
        async with redis_client.pubsub() as pubsub:
            await pubsub.subscribe(keys.EVENTS_CHANNEL)
            while True:
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                if message is not None:
                    event = json.loads(message["data"])
                    seen = await registry.model_versions(reader, event["model"])
                    await heard.put((event, seen))

    task = asyncio.create_task(listen())
    await asyncio.sleep(0.2)  # subscribed
    yield heard
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def next_event(heard: "asyncio.Queue[Heard]") -> Heard:
    return await asyncio.wait_for(heard.get(), timeout=5)


async def test_every_change_is_heard_with_the_change_in_place(
    redis_client: "aioredis.Redis", events: "asyncio.Queue[Heard]"
) -> None:
    store = RegistryStore(redis_client)
    await store.add(version("1.0"), make_default=False)
    event, seen = await next_event(events)
    assert (event["kind"], event["version"], seen) == ("registered", "1.0", ("1.0", {"1.0"}))

    await store.add(version("2.0"), make_default=False)
    assert (await next_event(events))[1] == ("1.0", {"1.0", "2.0"}), "the default stays"

    await store.set_default("m", "2.0")
    event, seen = await next_event(events)
    assert (event["kind"], seen) == ("default", ("2.0", {"1.0", "2.0"}))

    await store.update(version("1.0", min_workers=3, max_workers=4), "scaled")
    assert (await next_event(events))[0]["kind"] == "scaled"
    assert (await store.get("m", "1.0") or version("x")).min_workers == 3

    await store.mark_removing("m", "1.0")
    assert (await next_event(events))[0]["kind"] == "unregistering"
    assert not await store.is_active("m", "1.0")
    assert await store.get_active("m", "1.0") is None
    assert await store.get_active("m", "2.0") is not None

    await redis_client.xadd(keys.job_stream("m", "1.0"), {"m": b"job"})
    await store.remove("m", "1.0", last=False)
    event, seen = await next_event(events)
    assert (event["kind"], seen) == ("unregistered", ("2.0", {"2.0"}))
    assert not await redis_client.exists(keys.job_stream("m", "1.0"), keys.version_config("m", "1.0"))

    await store.remove("m", "2.0", last=True)
    assert (await next_event(events))[1] == (None, set())
    assert await store.model_names() == []


async def test_removal_deletes_the_sequences_of_a_stateful_version(redis_client: "aioredis.Redis") -> None:
    store = RegistryStore(redis_client)
    await store.add(version("1.0", sequence_batching=True, sequence_max_idle_ms=1000), make_default=True)
    await store.add(version("1.1"), make_default=False)
    sequence_keys = [
        keys.sequence("m", "1.0", "s*1"),  # ids may hold glob characters
        keys.sequence_jobs("m", "1.0", "s*1"),
        keys.live_sequences("m", "1.0"),
        keys.held_sequences("m", "1.0", ""),
        keys.held_sequences("m", "1.0", "w1"),
        keys.sequence_holders("m", "1.0"),
        keys.sequence_inbox("m", "1.0", "w1"),
    ]
    for key in sequence_keys:
        await redis_client.set(key, b"x")
    other = keys.sequence("m", "1.1", "s*1")
    await redis_client.set(other, b"x")

    await store.remove("m", "1.0", last=False)
    assert await redis_client.exists(*sequence_keys) == 0
    assert await redis_client.exists(other) == 1, "another version's sequences stay"
