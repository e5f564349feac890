"""The reconcile lease: several managers may share one Redis, but only one reconciles at a time
(two would both start the missing workers). The holder renews it on every pass; a holder that died
without releasing it is replaced once the TTL runs out, or at once when it ran on this host and its
process is gone (a manager restarted after kill -9 need not wait)."""

import json
import time

import psutil
import redis.asyncio as aioredis
from sluice.log import get_logger
from sluice.redis import keys

log = get_logger(__name__)

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
_REPLACE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class ManagerLease:
    def __init__(self, redis: "aioredis.Redis", *, host: str, pid: int, ttl_s: float) -> None:
        self.redis = redis
        self.host = host
        self.pid = pid
        self.ttl_ms = int(ttl_s * 1000)
        self.identity = json.dumps({"host": host, "pid": pid, "since_unix_ms": int(time.time() * 1000)})
        self.held = False

    async def hold(self) -> bool:
        """Acquire or renew the lease; True while this manager holds it."""
        held = await self._renew() or await self._acquire()
        if held != self.held:
            log.info("reconcile lease acquired" if held else "reconcile lease held by another manager")
        self.held = held
        return held

    async def _renew(self) -> bool:
        return bool(
            self.held and await self.redis.eval(_RENEW, 1, keys.MANAGER_LEASE, self.identity, self.ttl_ms)
        )

    async def _acquire(self) -> bool:
        if await self.redis.set(keys.MANAGER_LEASE, self.identity, nx=True, px=self.ttl_ms):
            return True
        holder = await self.redis.get(keys.MANAGER_LEASE)
        if holder is None:
            return False
        text = holder.decode() if isinstance(holder, bytes) else holder
        if text == self.identity:
            return True
        if not self._holder_is_dead(text):
            return False
        replaced = await self.redis.eval(_REPLACE, 1, keys.MANAGER_LEASE, text, self.identity, self.ttl_ms)
        return bool(replaced)

    def _holder_is_dead(self, holder: str) -> bool:
        try:
            info = json.loads(holder)
            host, pid = str(info["host"]), int(info["pid"])
        except (ValueError, KeyError, TypeError):
            return False
        if host != self.host or pid == self.pid:
            return False
        return not _is_manager(pid)

    async def release(self) -> None:
        if self.held:
            await self.redis.eval(_RELEASE, 1, keys.MANAGER_LEASE, self.identity)
            self.held = False


def _is_manager(pid: int) -> bool:
    try:
        process = psutil.Process(pid)
        return process.status() != psutil.STATUS_ZOMBIE and "sluice_manager" in " ".join(process.cmdline())
    except psutil.Error:
        return False
