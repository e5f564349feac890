"""Registry events on Redis pub/sub (:data:`sluice.redis.keys.EVENTS_CHANNEL`): each one drops the registry
cache's entries of its model, so that a change reaches the gateway before the cache's TTL. An idle
subscription pings its connection, so one to a master that died silently (a failover) is replaced."""

import asyncio
import json
import time

from sluice.lifecycle.backoff import Backoff
from sluice.lifecycle.cancellation import cancel_and_wait
from sluice.log import get_logger
from sluice.redis import keys
from sluice.redis.control import ControlRedis
from sluice.redis.errors import RedisError

from sluice_gateway.registry_cache import VersionResolver

log = get_logger(__name__)

# A subscription that heard nothing for this long pings its connection (see Subscription.ping).
IDLE_PING_S = 5.0


class RegistryEvents:
    """Listens on :data:`sluice.redis.keys.EVENTS_CHANNEL` and invalidates the cache.

    Every (re)subscription clears the whole cache: events published while we were not subscribed
    are lost."""

    def __init__(self, redis: ControlRedis, cache: VersionResolver) -> None:
        self._redis = redis
        self._cache = cache
        self._task: asyncio.Task[None] | None = None
        self.subscribed = asyncio.Event()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="registry-events")

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None

    async def _run(self) -> None:
        backoff = Backoff(first_s=0.05, jitter=True)
        while True:
            try:
                await self._listen(backoff)
            except RedisError as exc:
                log.warning("registry events lost", error=str(exc))
            except Exception:
                log.exception("registry events error")
            self.subscribed.clear()
            self._cache.invalidate()
            await asyncio.sleep(backoff.next_delay_s())

    async def _listen(self, backoff: Backoff) -> None:
        async with self._redis.pubsub() as pubsub:
            await pubsub.subscribe(keys.EVENTS_CHANNEL)
            idle_since = time.monotonic()
            while True:
                message = await pubsub.get_message(timeout=1.0)
                if message is None:
                    if time.monotonic() - idle_since >= IDLE_PING_S:
                        await pubsub.ping()
                        idle_since = time.monotonic()
                    continue
                idle_since = time.monotonic()
                if message["type"] == "subscribe":
                    self._cache.invalidate()
                    self.subscribed.set()
                    backoff.reset()
                elif message["type"] == "message":
                    self._cache.invalidate(event_model(message["data"]))


def event_model(data: bytes | str) -> str | None:
    """The model a registry event is about; None (everything) when the event is not understood."""
    try:
        model = json.loads(data).get("model")
    except (ValueError, AttributeError):
        return None
    return model if isinstance(model, str) and model else None
