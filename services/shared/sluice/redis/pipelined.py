"""A lean, pipelining Redis client for the hot path: one connection, hiredis to pack and parse, and
every command issued during one event-loop turn leaves in a single write.

Why not redis-py here: per command it takes a pooled connection, builds and parses in Python and
writes once (profiles showed 20 to 35% of the gateway's and the worker's CPU in it). This client keeps
what the hot path needs — commands in order on one socket, failures as :mod:`sluice.redis.errors` —
and nothing else. The gateway's control plane runs on it too (:mod:`sluice.redis.control`); the
worker's and the manager's off-hot-path work (management, heartbeats, claim scans) stays on redis-py.

Contract:
- :meth:`send` queues a command and returns a future for its reply; the bytes go out at the end of the
  current loop turn together with the other commands queued in it. Replies come back in order. A
  command that carries a payload (a job, a reply) says so with ``payload=True``: its arguments of
  ``LARGE_ARG_BYTES`` or more (:mod:`sluice.redis.resp`) are then written as buffers of their own;
  other commands skip the check.
- Redis error replies resolve the future with :class:`sluice.redis.errors.ReplyError`.
- The connection opens on first use and again after it was lost; a loss (or a reply overdue past its
  timeout) fails every command in flight with :class:`sluice.redis.errors.RedisDown`. Nothing is
  retried here: whether a command may run twice is the caller's call.
- Through Sentinel (a ``redis+sentinel://`` URL, :mod:`sluice.redis.target`) each new connection asks
  the Sentinels for the master and checks ``ROLE`` before use. A replica's answer (``READONLY``, or
  ``UNBLOCKED`` when a master is turned into a replica under a blocked read) counts as a lost
  connection, so the next command finds the master that a failover promoted.
- Messages nobody asked for (pub/sub) go to ``on_push``; ``on_lost`` hears of every lost connection.
- A blocking command (``XREAD BLOCK``) holds the connection: give blocking reads a client of their own,
  and pass a timeout longer than the block.
"""

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import hiredis

from sluice.log import get_logger
from sluice.redis.endpoint import Endpoint, open_any, open_transport
from sluice.redis.errors import RedisDown, ReplyError
from sluice.redis.resp import Arg, coalesced, is_large, pack, pack_parts
from sluice.redis.sentinel import master_address

log = get_logger(__name__)

DEFAULT_TIMEOUT_S = 5.0
CONNECT_TIMEOUT_S = 5.0


class _BadReply(Exception):
    """What hiredis raises on bytes that are not RESP."""


def _classify(error: ReplyError) -> Exception:
    """A Redis that is still loading its data counts as down, so callers wait it out like a restart,
    and so does a master refusing writes for want of replicas (``min-replicas-to-write``); other error
    replies stay ReplyError."""
    message = str(error)
    return RedisDown(message) if message.startswith(("LOADING", "NOREPLICAS")) else error


# Error replies that mean the connection reached a replica (a master demoted by a failover): the
# connection is dropped, so that the next one goes to the master.
_NOT_MASTER = ("READONLY", "UNBLOCKED", "MASTERDOWN")


def _not_master(reply: Any) -> str:
    """Why a ``ROLE`` reply disqualifies a connection (empty: it is the master's)."""
    role = reply[0] if isinstance(reply, list) and reply else reply
    return "" if role == b"master" else f"Redis there is not the master (role {role!r})"


@dataclass(slots=True)
class _Pending:
    future: "asyncio.Future[Any]"
    deadline: float
    # AUTH / SELECT / ROLE of a new connection: a refusal (or a replica's ROLE) closes the connection.
    handshake: bool = False


class _Protocol(asyncio.Protocol):
    def __init__(self, client: "PipelinedRedis") -> None:
        self._client = client

    def data_received(self, data: bytes) -> None:
        self._client._received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._client._lost(self, exc)


async def run_script(
    send: "Callable[..., asyncio.Future[Any]]",
    sha: str,
    script: str,
    keys: list[str],
    args: list[Arg],
    *,
    payload: bool = False,
) -> Any:
    """A Lua script run through ``send`` by digest, with EVAL when Redis does not know it."""
    try:
        return await send("EVALSHA", sha, len(keys), *keys, *args, payload=payload)
    except ReplyError as exc:
        if not str(exc).startswith("NOSCRIPT"):
            raise
    return await send("EVAL", script, len(keys), *keys, *args, payload=payload)


class PipelinedRedis:
    # Commands reach Redis in the order they were sent (one connection).
    ordered = True

    def __init__(
        self,
        url: str | Endpoint,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        name: str = "redis",
        on_push: Callable[[Any], None] | None = None,
        on_lost: Callable[[Exception], None] | None = None,
    ) -> None:
        self._endpoint = url if isinstance(url, Endpoint) else Endpoint.from_url(url)
        self._timeout_s = timeout_s
        self._name = name
        self._on_push = on_push
        self._on_lost = on_lost
        self._transport: asyncio.Transport | None = None
        self._protocol: _Protocol | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._reader = hiredis.Reader(protocolError=_BadReply, replyError=ReplyError)
        self._pending: deque[_Pending] = deque()
        self._out: list[bytes] = []
        # Whether _out holds a large argument (written as its own buffer).
        self._large_out = False
        self._flush_scheduled = False
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False
        # The loop of the first command. Cached: on Python 3.11 every asyncio.get_running_loop() is
        # a getpid() system call, and this is called once per command.
        self._loop: asyncio.AbstractEventLoop | None = None

    # Public ---------------------------------------------------------------------------------------
    def send(
        self, *args: Arg, timeout_s: float | None = None, payload: bool = False
    ) -> "asyncio.Future[Any]":
        """Queue one command; the future resolves with its reply (or a RedisError). A client serves
        the event loop of its first command. ``payload``: the command may carry a large argument."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if self._closed:
            future.set_exception(RedisDown(f"{self._name}: client closed"))
            return future
        deadline = loop.time() + (self._timeout_s if timeout_s is None else timeout_s)
        self._pending.append(_Pending(future, deadline))
        if payload and any(is_large(arg) for arg in args):
            self._out += pack_parts(args)
            self._large_out = True
        else:
            self._out.append(pack(args))
        if self._transport is None:
            if self._connecting is None:
                self._connecting = loop.create_task(self._connect(), name=f"{self._name}-connect")
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._flush)
        if self._timer is None:
            self._arm_timer(loop)
        return future

    async def execute(self, *args: Arg, timeout_s: float | None = None) -> Any:
        return await self.send(*args, timeout_s=timeout_s)

    async def evalsha(
        self, sha: str, script: str, keys: list[str], args: list[Arg], *, payload: bool = False
    ) -> Any:
        """Run a Lua script by digest, loading it with EVAL when Redis does not know it (restart)."""
        return await run_script(self.send, sha, script, keys, args, payload=payload)

    async def node_for(self, key: str) -> "PipelinedRedis":
        """The connection that serves ``key``: this one (see :meth:`ClusterRedis.node_for`)."""
        return self

    async def close(self) -> None:
        """Fail what is in flight and close the connection; later sends fail at once."""
        self._closed = True
        if self._connecting is not None:
            self._connecting.cancel()
            await asyncio.gather(self._connecting, return_exceptions=True)
        self._disconnect(RedisDown(f"{self._name}: client closed"))

    # Connection -----------------------------------------------------------------------------------
    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        endpoint = self._endpoint
        protocol = _Protocol(self)
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                if endpoint.sentinel is not None:
                    host, port = await master_address(endpoint.sentinel, CONNECT_TIMEOUT_S / 2)
                    endpoint = Endpoint(host=host, port=port)
                if endpoint.cluster is not None:
                    transport = await open_any(loop, protocol, endpoint.cluster.seeds)
                else:
                    transport = await open_transport(loop, protocol, endpoint)
        except (OSError, TimeoutError, RedisDown) as exc:
            self._connecting = None
            self._fail_all(RedisDown(f"{self._name}: cannot connect to Redis: {exc}"))
            return
        except asyncio.CancelledError:
            self._connecting = None
            raise
        self._transport, self._protocol, self._connecting = transport, protocol, None
        self._reader = hiredis.Reader(protocolError=_BadReply, replyError=ReplyError)
        commands = self._endpoint.handshake()
        deadline = loop.time() + self._timeout_s
        self._pending.extendleft(_Pending(loop.create_future(), deadline, handshake=True) for _ in commands)
        self._out[:0] = [pack(command) for command in commands]
        self._flush()

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._transport is None or not self._out:
            return
        if self._large_out:
            self._large_out = False
            self._transport.writelines(coalesced(self._out))
            self._out.clear()
            return
        data = self._out[0] if len(self._out) == 1 else b"".join(self._out)
        self._out.clear()
        self._transport.write(data)

    def _received(self, data: bytes) -> None:
        self._reader.feed(data)
        while True:
            try:
                reply = self._reader.gets()
            except _BadReply as exc:
                self._disconnect(RedisDown(f"{self._name}: bad reply from Redis: {exc}"))
                return
            if reply is False:  # incomplete (a nil reply is None)
                return
            if not self._pending:
                if self._on_push is not None:
                    self._on_push(reply)
                    continue
                self._disconnect(RedisDown(f"{self._name}: reply without a command"))
                return
            item = self._pending.popleft()
            future = item.future
            if item.handshake and (refusal := self._refusal(reply)):
                # A replica where the Sentinels named the master is a failover under way: a warning.
                level = log.error if isinstance(reply, ReplyError) else log.warning
                level("redis refused the connection", client=self._name, error=refusal)
                self._disconnect(RedisDown(f"{self._name}: Redis refused the connection: {refusal}"))
                return
            if (
                isinstance(reply, ReplyError)
                and self._endpoint.cluster_node is False
                and str(reply).startswith(_NOT_MASTER)
            ):
                lost = RedisDown(f"{self._name}: Redis is no longer the master: {reply}")
                if not future.done():
                    future.set_exception(lost)
                    future.exception()
                self._disconnect(lost)
                return
            if future.done():  # its caller was cancelled (or a handshake step): the reply is consumed
                continue
            if isinstance(reply, ReplyError):
                future.set_exception(_classify(reply))
            else:
                future.set_result(reply)

    def _refusal(self, reply: Any) -> str:
        """Why a handshake reply closes the connection (empty: it does not). Only a Sentinel
        endpoint sends ROLE, the last step of its handshake."""
        if isinstance(reply, ReplyError):
            return str(reply)
        if isinstance(reply, list) and reply and isinstance(reply[0], bytes):
            return _not_master(reply)
        return ""

    def _lost(self, protocol: _Protocol, exc: Exception | None) -> None:
        if protocol is not self._protocol:
            return
        reason = f": {exc}" if exc is not None else ""
        self._disconnect(RedisDown(f"{self._name}: connection to Redis lost{reason}"))

    def _disconnect(self, error: Exception) -> None:
        transport = self._transport
        self._transport, self._protocol = None, None
        if transport is not None:
            transport.abort()
        self._fail_all(error)
        if transport is not None and self._on_lost is not None:
            self._on_lost(error)

    def _fail_all(self, error: Exception) -> None:
        self._out.clear()
        self._large_out = False
        pending, self._pending = self._pending, deque()
        for item in pending:
            if not item.future.done():
                item.future.set_exception(error)
                # Retrieved here so that a caller that went away does not log "never retrieved".
                item.future.exception()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # Reply deadlines ------------------------------------------------------------------------------
    def _arm_timer(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = loop.call_at(self._pending[0].deadline, self._check_deadline)

    def _check_deadline(self) -> None:
        self._timer = None
        if not self._pending or self._loop is None:
            return
        loop = self._loop
        if self._pending[0].deadline <= loop.time():
            self._disconnect(RedisDown(f"{self._name}: Redis did not answer in time"))
            return
        self._arm_timer(loop)
