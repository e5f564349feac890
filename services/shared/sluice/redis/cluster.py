"""Sluice's pipelined client (:mod:`sluice.redis.pipelined`) over a Redis Cluster: one pipelined
connection per master, and each command sent to the master that serves its key's slot.

Contract, beyond :class:`~sluice.redis.pipelined.PipelinedRedis`'s (same ``send`` / ``evalsha``):
- The slot map comes from ``CLUSTER SLOTS``, asked of the known nodes and then of the seeds. Commands
  sent before it is known wait for it, in order; if no node answers they fail with RedisDown.
- Commands to one master leave in order on its connection; commands to different masters are not
  ordered. A caller that needs one write to land before another on a different slot awaits the first
  (:attr:`ordered` says whether it must).
- ``MOVED`` (a slot that moved: a resharding, or a failover that promoted a replica) updates the map
  and sends the command again to the new owner; ``ASK`` (a slot being migrated, its key already on the
  importing node) sends it there once, after ``ASKING``; ``TRYAGAIN`` (a multi-key command whose keys
  are split by a migration under way) retries after a moment, and so does ``UNBLOCKED`` (a blocked
  read whose key was migrated away). Each costs the caller nothing but time,
  within :data:`MAX_REDIRECTS` and :data:`TRYAGAIN_FOR_S`; beyond them the command fails with RedisDown.
- ``CLUSTERDOWN`` and a lost or refused connection fail the command with RedisDown, as one Redis going
  down does, and make the client ask for the slot map again (a failover moves the slots of a dead
  master to its promoted replica, which answers on another address).
- A keyless command goes to any known master.
"""

import asyncio
from dataclasses import dataclass
from functools import partial
from typing import Any

from sluice.log import get_logger
from sluice.redis.endpoint import Endpoint
from sluice.redis.errors import RedisDown, ReplyError
from sluice.redis.pipelined import DEFAULT_TIMEOUT_S, PipelinedRedis, run_script
from sluice.redis.resp import Arg
from sluice.redis.slots import command_key, key_slot, slot_owners
from sluice.redis.target import ClusterTarget, parse_cluster_url

log = get_logger(__name__)

Address = tuple[str, int]

# Redirections one command may follow before it fails (a slot moved again and again).
MAX_REDIRECTS = 5
# How long a command answered TRYAGAIN is retried, and how long between tries.
TRYAGAIN_FOR_S = 2.0
TRYAGAIN_EVERY_S = 0.02
# How often the slot map may be asked for again after a failure (a dead master is retried meanwhile).
REFRESH_EVERY_S = 0.25


@dataclass(slots=True)
class _Call:
    """One command on its way, as often as it is redirected."""

    future: "asyncio.Future[Any]"
    args: tuple[Arg, ...]
    timeout_s: float | None
    payload: bool
    redirects: int = 0
    # When the first TRYAGAIN came (retries stop TRYAGAIN_FOR_S later).
    tried_since: float | None = None


class ClusterRedis:
    """The pipelined client of a ``redis+cluster://`` URL (:mod:`sluice.redis.target`)."""

    # Whether commands sent in one loop turn reach Redis in the order they were sent: not across
    # slots here.
    ordered = False

    def __init__(
        self, url: str | ClusterTarget, *, timeout_s: float = DEFAULT_TIMEOUT_S, name: str = "redis"
    ) -> None:
        self._target = url if isinstance(url, ClusterTarget) else parse_cluster_url(url)
        self._timeout_s = timeout_s
        self._name = name
        self._nodes: dict[Address, PipelinedRedis] = {}
        # The master of each slot; empty until the map is known.
        self._owners: list[Address] = []
        # Commands that came before the map, in order.
        self._waiting: list[_Call] = []
        self._refresh: asyncio.Task[None] | None = None
        self._refreshed_at = float("-inf")
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None

    # Public ---------------------------------------------------------------------------------------
    def send(
        self, *args: Arg, timeout_s: float | None = None, payload: bool = False
    ) -> "asyncio.Future[Any]":
        """Queue one command for the master of its key; the future resolves with its reply (or a
        RedisError), redirections followed."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if self._closed:
            future.set_exception(RedisDown(f"{self._name}: client closed"))
        elif not self._owners:
            self._waiting.append(_Call(future, args, timeout_s, payload))
            self._refresh_map(at_once=True)
        else:
            self._dispatch(_Call(future, args, timeout_s, payload), self._owner_of(args))
        return future

    async def execute(self, *args: Arg, timeout_s: float | None = None) -> Any:
        return await self.send(*args, timeout_s=timeout_s)

    async def evalsha(
        self, sha: str, script: str, keys: list[str], args: list[Arg], *, payload: bool = False
    ) -> Any:
        """Run a Lua script by digest, loading it with EVAL when its master does not know it."""
        return await run_script(self.send, sha, script, keys, args, payload=payload)

    async def node_for(self, key: str) -> PipelinedRedis:
        """The connection to the master of ``key``'s slot, for commands that must share one
        connection (``MULTI``/``EXEC``); RedisDown when the map cannot be had."""
        if not self._owners:
            await self.send("PING")  # waits for the map
        return self._node(self._owners[key_slot(key)])

    def owner(self, key: str) -> Address | None:
        """Where ``key``'s slot lives as far as this client knows (None: the map is not known yet)."""
        return self._owners[key_slot(key)] if self._owners else None

    async def close(self) -> None:
        """Fail what is in flight and close every connection; later sends fail at once."""
        self._closed = True
        if self._refresh is not None:
            self._refresh.cancel()
            await asyncio.gather(self._refresh, return_exceptions=True)
        self._fail_waiting(RedisDown(f"{self._name}: client closed"))
        nodes, self._nodes = list(self._nodes.values()), {}
        for node in nodes:
            await node.close()

    # Routing --------------------------------------------------------------------------------------
    def _owner_of(self, args: tuple[Arg, ...]) -> Address:
        key = command_key(args)
        if key is None:
            return self._owners[0]
        return self._owners[key_slot(key)]

    def _node(self, address: Address) -> PipelinedRedis:
        node = self._nodes.get(address)
        if node is None:
            target = self._target
            endpoint = Endpoint(
                host=address[0],
                port=address[1],
                username=target.username,
                password=target.password,
                cluster_node=True,
            )
            node = PipelinedRedis(
                endpoint,
                timeout_s=self._timeout_s,
                name=f"{self._name}@{address[0]}:{address[1]}",
                on_lost=self._node_lost,
            )
            self._nodes[address] = node
        return node

    def _dispatch(self, call: _Call, address: Address, *, asking: bool = False) -> None:
        node = self._node(address)
        if asking:
            _ignore(node.send("ASKING"))
        sent = node.send(*call.args, timeout_s=call.timeout_s, payload=call.payload)
        sent.add_done_callback(partial(self._answered, call))

    def _answered(self, call: _Call, sent: "asyncio.Future[Any]") -> None:
        future = call.future
        if future.done():
            if not sent.cancelled():
                sent.exception()  # retrieved: the caller went away
            return
        if sent.cancelled():
            future.cancel()
            return
        error = sent.exception()
        if error is None:
            future.set_result(sent.result())
            return
        if isinstance(error, ReplyError):
            if self._followed(call, str(error)):
                return
            if str(error).startswith("CLUSTERDOWN"):
                self._refresh_map()
                error = RedisDown(f"{self._name}: {error}")
        elif isinstance(error, RedisDown):
            self._refresh_map()
        future.set_exception(error)
        if isinstance(error, RedisDown):
            # As a lost connection's are (PipelinedRedis): a caller that went away logs nothing.
            future.exception()

    def _followed(self, call: _Call, message: str) -> bool:
        """Send the command again if ``message`` redirects it (False: ``message`` is its answer)."""
        loop = self._loop
        assert loop is not None
        word, _, rest = message.partition(" ")
        if word in ("MOVED", "ASK"):
            slot_text, _, where = rest.partition(" ")
            host, _, port_text = where.rpartition(":")
            if call.redirects >= MAX_REDIRECTS or not slot_text.isdigit() or not port_text.isdigit():
                return False
            address = (host, int(port_text))
            if word == "MOVED":
                self._owners[int(slot_text)] = address
                self._refresh_map()
            call.redirects += 1
            self._dispatch(call, address, asking=word == "ASK")
            return True
        if word == "UNBLOCKED" and call.redirects < MAX_REDIRECTS:
            # A blocked read whose key left this master (migrated, or its slot moved): once the map
            # is asked again, read where the key lives now.
            self._refresh_map()
            call.redirects += 1
            loop.call_later(TRYAGAIN_EVERY_S, self._again, call)
            return True
        if word == "TRYAGAIN":
            if call.tried_since is None:
                call.tried_since = loop.time()
            if loop.time() - call.tried_since >= TRYAGAIN_FOR_S:
                return False
            loop.call_later(TRYAGAIN_EVERY_S, self._again, call)
            return True
        return False

    def _again(self, call: _Call) -> None:
        """Send ``call`` again to the master of its key as the map now has it."""
        if call.future.done():
            return
        if self._closed:
            call.future.set_exception(RedisDown(f"{self._name}: client closed"))
            return
        self._dispatch(call, self._owner_of(call.args))

    # The slot map ---------------------------------------------------------------------------------
    def _node_lost(self, error: Exception) -> None:
        self._refresh_map()

    def _refresh_map(self, *, at_once: bool = False) -> None:
        """Ask for the slot map again (one asker at a time, at most every REFRESH_EVERY_S)."""
        if self._closed or self._refresh is not None or self._loop is None:
            return
        delay = 0.0 if at_once else max(0.0, self._refreshed_at + REFRESH_EVERY_S - self._loop.time())
        self._refresh = self._loop.create_task(self._load_map(delay), name=f"{self._name}-slots")

    async def _load_map(self, delay_s: float) -> None:
        try:
            if delay_s:
                await asyncio.sleep(delay_s)
            owners = await self._ask_slots()
        except RedisDown as exc:
            log.warning("redis cluster slot map unknown", client=self._name, error=str(exc))
            self._fail_waiting(exc)
            return
        finally:
            self._refresh = None
            if self._loop is not None:
                self._refreshed_at = self._loop.time()
        self._owners = owners
        waiting, self._waiting = self._waiting, []
        for call in waiting:
            if not call.future.done():
                self._dispatch(call, self._owner_of(call.args))

    async def _ask_slots(self) -> list[Address]:
        """The master of every slot, from the first node that answers with a map covering all."""
        candidates = list(dict.fromkeys([*set(self._owners), *self._target.seeds]))
        reasons: list[str] = []
        for address in candidates:
            try:
                reply = await self._node(address).send("CLUSTER", "SLOTS", timeout_s=self._timeout_s)
                return slot_owners(reply, address[0])
            except (RedisDown, ReplyError, ValueError) as exc:
                reasons.append(f"{address[0]}:{address[1]}: {exc}")
        raise RedisDown(f"{self._name}: no Redis Cluster node gave the slot map ({'; '.join(reasons)})")

    def _fail_waiting(self, error: Exception) -> None:
        waiting, self._waiting = self._waiting, []
        for call in waiting:
            if not call.future.done():
                call.future.set_exception(error)
                call.future.exception()


def _ignore(future: "asyncio.Future[Any]") -> None:
    """Let ``future`` end without anyone awaiting it (its failure is not logged as unretrieved)."""
    future.add_done_callback(lambda done: done.cancelled() or done.exception())
