"""A lock in Redis that only its holder can renew or release: ``SET key token NX PX ttl`` to take it,
compare-and-pexpire to renew, compare-and-delete to release. While held through :meth:`TokenLock.held`
a background task renews it, so a long operation keeps it and a crashed holder loses it after the TTL.

Used for the per-model lock of the management API (several managers may share one Redis) and for
the lease of a running control-plane operation.
"""

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator

import redis.asyncio as aioredis
from redis.exceptions import RedisError
from sluice.errors import ErrorCode, SluiceError
from sluice.lifecycle.cancellation import cancel_and_wait
from sluice.log import get_logger
from sluice.redis import keys

log = get_logger(__name__)

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""
_RETRY_INTERVAL_S = 0.05


class TokenLock:
    def __init__(self, redis: "aioredis.Redis", key: str, *, ttl_s: float) -> None:
        self.redis = redis
        self.key = key
        self.ttl_ms = max(1, int(ttl_s * 1000))
        self.token = secrets.token_hex(16)
        self.lost = asyncio.Event()

    async def acquire(self, wait_s: float = 0.0) -> bool:
        """Take the lock, retrying for up to ``wait_s``; False if someone else kept it."""
        deadline = time.monotonic() + wait_s
        while True:
            if await self.redis.set(self.key, self.token, nx=True, px=self.ttl_ms):
                self.lost.clear()
                return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(_RETRY_INTERVAL_S)

    async def renew(self) -> bool:
        return bool(await self.redis.eval(_RENEW, 1, self.key, self.token, self.ttl_ms))

    async def release(self) -> None:
        await self.redis.eval(_RELEASE, 1, self.key, self.token)

    @contextlib.asynccontextmanager
    async def held(self) -> AsyncIterator["TokenLock"]:
        """Renew the (acquired) lock every third of its TTL while the block runs, release it after.
        ``lost`` is set if a renewal finds the lock gone (it expired: the holder stalled)."""
        renewer = asyncio.create_task(self._renew_until_cancelled(), name=f"renew {self.key}")
        try:
            yield self
        finally:
            # A renewal's redis-py call can turn the cancellation into a RedisError the loop survives.
            await cancel_and_wait(renewer)
            with contextlib.suppress(RedisError):
                await self.release()

    async def _renew_until_cancelled(self) -> None:
        while True:
            await asyncio.sleep(self.ttl_ms / 3000)
            try:
                if not await self.renew():
                    log.warning("lock lost", key=self.key)
                    self.lost.set()
                    return
            except RedisError as exc:
                log.warning("lock renewal failed", key=self.key, error=str(exc))


class ModelLocks:
    """The per-model locks of the management API, as the domain code takes them."""

    def __init__(self, redis: "aioredis.Redis") -> None:
        self._redis = redis

    def hold(self, model: str, *, wait_s: float) -> contextlib.AbstractAsyncContextManager[TokenLock]:
        """The model's lock for the block; ABORTED when another operation keeps it past ``wait_s``."""
        return model_lock(self._redis, model, wait_s=wait_s)


@contextlib.asynccontextmanager
async def model_lock(
    redis: "aioredis.Redis", model: str, *, wait_s: float, ttl_s: float = 15.0
) -> AsyncIterator[TokenLock]:
    """Hold the per-model lock for the block; ABORTED when another operation keeps it past ``wait_s``."""
    lock = TokenLock(redis, keys.model_lock(model), ttl_s=ttl_s)
    if not await lock.acquire(wait_s):
        raise SluiceError(
            ErrorCode.ABORTED, f"Another management operation is in progress for model {model}; retry later"
        )
    async with lock.held():
        yield lock
