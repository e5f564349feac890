"""Control-plane operations (register, unregister) as records in Redis: what was asked, how far it got,
how it ended. A Celery task runs an operation by id; the API call that created it waits on the record.

An operation is created ``pending``, becomes ``running`` when a task claims it (holding its lease,
:data:`sluice.redis.keys.operation_lease`) and ends ``done`` or ``failed`` with a status and a client-safe
message. Ids of unfinished operations sit in :data:`sluice.redis.keys.OPEN_OPERATIONS`, so that a restarted
manager finds those whose task died with its predecessor and submits them again. Finished records
expire after :data:`FINISHED_TTL_S`.
"""

import asyncio
import enum
import time
import uuid
from typing import Any

import redis.asyncio as aioredis
from pydantic import BaseModel, ConfigDict
from sluice.errors import ErrorCode, SluiceError
from sluice.redis import keys
from sluice.redis.writes import ordered_writes

FINISHED_TTL_S = 24 * 3600
_POLL_INTERVAL_S = 0.05


class OpKind(enum.StrEnum):
    REGISTER = "register"
    UNREGISTER = "unregister"


class OpState(enum.StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class Operation(BaseModel):
    model_config = ConfigDict(frozen=True)

    op_id: str
    kind: OpKind
    # The request, JSON-safe (see registration.RegisterParams / removal.UnregisterParams).
    params: dict[str, Any]
    state: OpState = OpState.PENDING
    attempts: int = 0
    created_unix_ms: int = 0
    updated_unix_ms: int = 0
    # Register: where the archive was unpacked, and the version it turned out to be, recorded before
    # the registry commit so that a retry recognises (or cleans up) what an earlier attempt did.
    model_dir: str = ""
    model_name: str = ""
    version: str = ""
    min_workers: int = 0
    # Outcome: HTTP-style status and message on success; ErrorCode name and message on failure.
    status: int = 0
    message: str = ""
    error_code: str = ""

    @property
    def finished(self) -> bool:
        return self.state in (OpState.DONE, OpState.FAILED)

    def error(self) -> SluiceError:
        """The failure as a domain error (only for a failed operation)."""
        try:
            code = ErrorCode[self.error_code]
        except KeyError:
            code = ErrorCode.INTERNAL
        return SluiceError(code, self.message, http_status=self.status or None)


def _now_ms() -> int:
    return int(time.time() * 1000)


class OperationStore:
    def __init__(self, redis: "aioredis.Redis") -> None:
        self.redis = redis

    async def create(self, kind: OpKind, params: dict[str, Any]) -> Operation:
        now = _now_ms()
        op = Operation(
            op_id=uuid.uuid4().hex, kind=kind, params=params, created_unix_ms=now, updated_unix_ms=now
        )
        async with ordered_writes(self.redis) as pipe:
            pipe.set(keys.operation(op.op_id), op.model_dump_json())
            pipe.sadd(keys.OPEN_OPERATIONS, op.op_id)
            await pipe.execute()
        return op

    async def get(self, op_id: str) -> Operation | None:
        raw = await self.redis.get(keys.operation(op_id))
        return None if raw is None else Operation.model_validate_json(raw)

    async def update(self, op: Operation, **changes: Any) -> Operation:
        """Write ``op`` with ``changes``; only the task holding the operation's lease calls this."""
        updated = op.model_copy(update={**changes, "updated_unix_ms": _now_ms()})
        await self.redis.set(keys.operation(op.op_id), updated.model_dump_json())
        return updated

    async def finish(self, op: Operation, status: int, message: str) -> Operation:
        return await self._close(op, state=OpState.DONE, status=status, message=message, error_code="")

    async def fail(self, op: Operation, error: SluiceError) -> Operation:
        return await self._close(
            op, state=OpState.FAILED, status=error.http_status, message=error.message,
            error_code=error.code.name,
        )  # fmt: skip

    async def _close(self, op: Operation, **changes: Any) -> Operation:
        closed = op.model_copy(update={**changes, "updated_unix_ms": _now_ms()})
        async with ordered_writes(self.redis) as pipe:
            pipe.set(keys.operation(op.op_id), closed.model_dump_json(), ex=FINISHED_TTL_S)
            pipe.srem(keys.OPEN_OPERATIONS, op.op_id)
            await pipe.execute()
        return closed

    async def wait(self, op_id: str, *, timeout_s: float) -> Operation:
        """The operation once finished; UNAVAILABLE if that takes longer than ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            op = await self.get(op_id)
            if op is None:
                raise SluiceError(ErrorCode.INTERNAL, "The operation record disappeared")
            if op.finished:
                return op
            if time.monotonic() >= deadline:
                raise SluiceError(
                    ErrorCode.UNAVAILABLE, "The operation did not complete in time; it may still finish"
                )
            await asyncio.sleep(_POLL_INTERVAL_S)

    async def orphaned(self, min_age_s: float) -> list[str]:
        """Open operations nobody runs (no lease) and older than ``min_age_s``: their task was lost."""
        ids = sorted(_text(raw) for raw in await self.redis.smembers(keys.OPEN_OPERATIONS))
        found: list[str] = []
        cutoff = _now_ms() - int(min_age_s * 1000)
        for op_id in ids:
            op = await self.get(op_id)
            if op is None:
                await self.redis.srem(keys.OPEN_OPERATIONS, op_id)
            elif (
                not op.finished
                and op.updated_unix_ms <= cutoff
                and not await self.redis.exists(keys.operation_lease(op_id))
            ):
                found.append(op_id)
        return found


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
