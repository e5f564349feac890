"""The cluster id: what labels one manager cluster's containers (``io.sluice.cluster``), so that
managers sharing a Redis share it and a stack with its own Redis never touches another's workers."""

import secrets

import redis.asyncio as aioredis
from sluice.redis import keys


async def cluster_id(redis: "aioredis.Redis", configured: str) -> str:
    """``configured`` when set, else the id kept in Redis (the first manager to ask makes it)."""
    if configured:
        return configured
    await redis.set(keys.CLUSTER_ID, f"c{secrets.token_hex(4)}", nx=True)
    raw = await redis.get(keys.CLUSTER_ID)
    return raw.decode() if isinstance(raw, bytes) else str(raw)
