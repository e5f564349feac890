"""Keeps the gateway's reply stream alive: creates it, refreshes its TTL (so the stream of a dead
gateway expires) and notices when it vanished.

A stream that vanished means Redis lost its data (a restart without persistence): every job in
flight lost its reply path, so their calls fail at once with UNAVAILABLE instead of timing out.
"""

import asyncio
from pathlib import Path

from sluice.errors import ErrorCode, SluiceError
from sluice.lifecycle.cancellation import cancel_and_wait
from sluice.log import get_logger
from sluice.redis import keys
from sluice.redis.control import ControlRedis
from sluice.redis.errors import RedisError

from sluice_gateway.broker.redis_replies import RedisReplies

log = get_logger(__name__)

LOST_MESSAGE = "Service unavailable: the reply stream was lost (Redis restarted without its data)."
_SCRIPT = Path(__file__).with_name("keep_reply_stream.lua").read_text()


class ReplyStreamKeeper:
    def __init__(
        self,
        redis: ControlRedis,
        replies: RedisReplies,
        gateway_id: str,
        *,
        ttl_s: float,
        interval_s: float,
        alive_value: str,
    ) -> None:
        self._replies = replies
        self._keys = [keys.reply_stream(gateway_id), keys.gateway_alive(gateway_id)]
        self._args: list[str | int] = [int(ttl_s * 1000), alive_value]
        self._interval_s = interval_s
        self._script = redis.register_script(_SCRIPT)
        self._task: asyncio.Task[None] | None = None
        # False until the stream was first created: its creation then is no loss.
        self.established = False

    async def create(self) -> None:
        """Create the stream (or adopt it); raises when Redis is unreachable."""
        await self._script(keys=self._keys, args=self._args)
        self.established = True

    async def refresh(self) -> bool:
        """Refresh the TTLs; if the stream had vanished, fail the calls waiting on it and recreate it.
        Returns whether it had vanished."""
        mark = self._replies.mark()
        created = await self._script(keys=self._keys, args=self._args)
        if not created:
            return False
        # Replies sent while the stream was missing were dropped (workers XADD with NOMKSTREAM).
        failed = self._replies.stream_recreated(mark, SluiceError(ErrorCode.UNAVAILABLE, LOST_MESSAGE))
        if self.established:
            log.warning("reply stream vanished and was recreated", failed_calls=failed)
        self.established = True
        return True

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="reply-stream-keeper")

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                await self.refresh()
            except RedisError as exc:
                log.warning("reply stream heartbeat failed", error=str(exc))
            except Exception:
                log.exception("reply stream heartbeat error")
