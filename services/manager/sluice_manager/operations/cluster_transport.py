"""Celery's broker on a Redis Cluster: kombu's Redis transport, its connections sent to the master
that serves the slot of Celery's keys.

kombu has no Redis Cluster transport. Every key it writes starts with
:data:`sluice.redis.keys.CELERY_PREFIX`, whose hash tag puts them all in one slot, so its multi-key
commands (``BRPOP`` over the queues, the unacked-restore transaction) are valid there. As kombu's
Sentinel transport asks the Sentinels for the master on each new connection, this one asks the
Cluster's nodes for the owner of that slot; a connection that meets a redirection (the slot moved,
or a failover promoted a replica) is dropped as a lost one, and kombu's reconnection asks again.
"""

from typing import Any

import redis
from kombu.transport import TRANSPORT_ALIASES
from kombu.transport.redis import Channel as RedisChannel
from kombu.transport.redis import Transport as RedisTransport
from redis.exceptions import AskError, ClusterDownError, MovedError, TryAgainError
from sluice.redis import keys
from sluice.redis.cluster_probe import slot_owner_sync
from sluice.redis.slots import key_slot
from sluice.redis.target import parse_cluster_url

# The scheme of the broker URL Celery is given (kombu finds this transport by it).
SCHEME = "sluice-cluster"
CELERY_SLOT = key_slot(keys.CELERY_PREFIX)
_ASK_TIMEOUT_S = 2.0


class SlotOwnerConnection(redis.Connection):
    """A connection to the master of Celery's slot, found when it connects."""

    def __init__(self, *, cluster_url: str, **kwargs: Any) -> None:
        self._cluster = parse_cluster_url(cluster_url)
        super().__init__(**kwargs)  # type: ignore[no-untyped-call]

    def connect(self) -> None:
        self.host, self.port = slot_owner_sync(self._cluster, CELERY_SLOT, _ASK_TIMEOUT_S)
        super().connect()  # type: ignore[no-untyped-call]

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().read_response(*args, **kwargs)
        except (MovedError, AskError, TryAgainError, ClusterDownError) as exc:
            self.disconnect()  # type: ignore[no-untyped-call]
            raise redis.ConnectionError(f"Celery's Redis Cluster slot is elsewhere now: {exc}") from exc


class Channel(RedisChannel):
    """kombu's Redis channel; the Cluster's URL comes in the transport option ``cluster_url``."""

    from_transport_options = (*RedisChannel.from_transport_options, "cluster_url")  # type: ignore[assignment]
    connection_class = SlotOwnerConnection  # type: ignore[assignment]
    cluster_url = ""

    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        params: dict[str, Any] = super()._connparams(asynchronous)  # type: ignore[no-untyped-call]
        params["cluster_url"] = self.cluster_url
        return params


class Transport(RedisTransport):
    Channel = Channel
    driver_name = "redis"


def broker_url(redis_url: str) -> str:
    """The broker URL for a ``redis+cluster://`` URL: this transport's scheme and the first seed
    node (kombu's one host; connections go where :class:`SlotOwnerConnection` finds the slot)."""
    host, port = parse_cluster_url(redis_url).seeds[0]
    return f"{SCHEME}://{host}:{port}/0"


TRANSPORT_ALIASES.setdefault(SCHEME, f"{__name__}:Transport")
