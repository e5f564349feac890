"""Where a worker that does not see the manager's models folder fetches its model from: the manager's
artifact endpoint, whose URL and token the manager advertises in Redis."""

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from sluice.redis import keys

if TYPE_CHECKING:
    import redis.asyncio as aioredis


@dataclass(frozen=True)
class ArtifactEndpoint:
    url: str
    token: str


class ArtifactEndpoints(Protocol):
    async def current(self) -> ArtifactEndpoint | None:
        """The endpoint a manager advertises now; None while none does."""
        ...


class RedisArtifactEndpoints:
    def __init__(self, redis: "aioredis.Redis") -> None:
        self._redis = redis

    async def current(self) -> ArtifactEndpoint | None:
        url, token = await self._redis.mget(keys.ARTIFACT_URL, keys.ARTIFACT_TOKEN)
        if url is None or token is None:
            return None
        return ArtifactEndpoint(_text(url), _text(token))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
