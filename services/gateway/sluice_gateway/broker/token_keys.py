"""The token keys the gateway's verifier reads (:class:`sluice.auth.store.TokenStore`), on a Redis
connection of their own (``token-keys``), opened by :func:`sluice_gateway.security.gateway_security`."""

from sluice.auth.store import TokenStore
from sluice.redis.control import ControlRedis


class RedisTokenKeys:
    def __init__(self, redis_url: str) -> None:
        self._redis = ControlRedis(redis_url, name="token-keys")
        # What TokenVerifier reads the keys through.
        self.store = TokenStore(self._redis)

    async def aclose(self) -> None:
        await self._redis.aclose()
