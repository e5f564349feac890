"""The registered shared-memory regions (:class:`~sluice_gateway.kserve.shared_memory.RegionStore`) in
one Redis hash, region name -> record: every gateway reads what any of them registered. Redis failures
leave as :class:`~.seam.BrokerUnavailable`."""

from collections.abc import Sequence

from sluice.kserve.shared_memory import Region
from sluice.redis import keys
from sluice.redis.control import ControlRedis

from sluice_gateway.broker.redis_reader import unavailable


class RedisRegions:
    def __init__(self, redis: ControlRedis) -> None:
        self._redis = redis

    async def add(self, region: Region) -> bool:
        with unavailable():
            return bool(await self._redis.hsetnx(keys.SHARED_MEMORY_REGIONS, region.name, region.to_json()))

    async def remove(self, names: Sequence[str]) -> None:
        with unavailable():
            if names:
                await self._redis.hdel(keys.SHARED_MEMORY_REGIONS, *names)
            else:
                await self._redis.delete(keys.SHARED_MEMORY_REGIONS)

    async def find(self, names: Sequence[str]) -> dict[str, Region]:
        with unavailable():
            if not names:
                records = list((await self._redis.hgetall(keys.SHARED_MEMORY_REGIONS)).values())
            else:
                found = await self._redis.hmget(keys.SHARED_MEMORY_REGIONS, *names)
                records = [raw for raw in found if raw is not None]
        regions = [Region.from_json(raw) for raw in records]
        return {region.name: region for region in regions}
