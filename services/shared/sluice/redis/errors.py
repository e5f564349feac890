"""What Sluice's own Redis clients (:mod:`sluice.redis.pipelined`, :mod:`sluice.redis.control`) raise.

They do not raise redis-py's classes: importing any part of redis-py loads all of it (~6 MiB in the
gateway, which uses no redis-py). The worker uses both kinds of client (``sluice_worker.broker.retries``
names both kinds of failure); shared code that serves both catches :func:`failures`.
"""

import sys


class RedisError(Exception):
    """A command did not get its answer."""


class RedisDown(RedisError):
    """Redis could not be reached, the connection was lost or refused, an answer came too late, or
    Redis is still loading its data: worth waiting for and trying again."""


class ReplyError(RedisError):
    """Redis answered with an error (a wrong command, NOGROUP, a script error, ...)."""


def failures() -> tuple[type[BaseException], ...]:
    """Every Redis failure this process can see: Sluice's, and redis-py's once something imported
    it (only then can it raise)."""
    loaded = sys.modules.get("redis.exceptions")
    return (RedisError,) if loaded is None else (RedisError, loaded.RedisError)
