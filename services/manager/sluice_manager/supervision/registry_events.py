"""Registry events (:data:`sluice.redis.keys.EVENTS_CHANNEL`) wake the reconcile loop at once: a version
registered, scaled or being removed by a control-plane task (another process) is acted on without
waiting for the next reconcile interval. Pub/sub is at-most-once; the interval remains the safety net."""

import asyncio
from collections.abc import Callable

import redis.asyncio as aioredis
from redis.exceptions import RedisError
from sluice.log import get_logger
from sluice.redis import keys

log = get_logger(__name__)


async def wake_on_events(redis: "aioredis.Redis", wake: Callable[[], None], retry_s: float = 1.0) -> None:
    """Call ``wake`` for every registry event, until cancelled; reconnects after Redis outages."""
    while True:
        try:
            async with redis.pubsub() as pubsub:
                await pubsub.subscribe(keys.EVENTS_CHANNEL)
                while True:
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                    if message is not None:
                        wake()
        except (RedisError, OSError) as exc:
            log.warning("registry events lost; resubscribing", error=str(exc))
        await asyncio.sleep(retry_s)
