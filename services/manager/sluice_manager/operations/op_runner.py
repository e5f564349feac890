"""Running one control-plane operation by id, as a Celery task does: claim it (its lease), count the
attempt, run it, record the outcome. Safe to call again for the same id: a finished operation is left
as it is, one that another task is running is skipped, and past ``max_attempts`` it fails cleanly.
"""

from dataclasses import dataclass

import redis.asyncio as aioredis
from sluice.errors import INTERNAL_MESSAGE, ErrorCode, SluiceError
from sluice.log import get_logger
from sluice.redis import keys

from sluice_manager.models.fetch import Download
from sluice_manager.models.registration import Registrar, RegistrationConfig
from sluice_manager.models.removal import RemovalConfig, Remover
from sluice_manager.stores import Stores
from sluice_manager.stores.locks import TokenLock
from sluice_manager.stores.operations import Operation, OpKind, OpState

log = get_logger(__name__)


def zero_workers_message(model: str, version: str) -> str:
    return (
        f'Model "{model}" Version: {version} registered with 0 initial workers. '
        "Use scale workers API to add workers for the model."
    )


def unregistered_message(model: str) -> str:
    return f'Model "{model}" unregistered'


@dataclass(frozen=True)
class RunnerConfig:
    registration: RegistrationConfig
    removal: RemovalConfig
    max_attempts: int = 3
    lease_ttl_s: float = 10.0


class OperationRunner:
    def __init__(self, redis: "aioredis.Redis", config: RunnerConfig, *, download: Download | None) -> None:
        self.redis = redis
        self.config = config
        stores = Stores.on(redis)
        self.ops = stores.operations
        self.registrar = Registrar(stores, config.registration, download=download)
        self.remover = Remover(stores, config.removal)

    async def run(self, op_id: str) -> Operation | None:
        """Run the operation unless it is finished or running elsewhere; returns its final record."""
        lease = TokenLock(self.redis, keys.operation_lease(op_id), ttl_s=self.config.lease_ttl_s)
        if not await lease.acquire():
            log.info("operation already running elsewhere", op=op_id)
            return None
        async with lease.held():
            op = await self.ops.get(op_id)
            if op is None or op.finished:
                return op
            if op.attempts >= self.config.max_attempts:
                log.error("operation gave up", op=op_id, kind=op.kind.value, attempts=op.attempts)
                error = SluiceError(ErrorCode.INTERNAL, f"The operation failed after {op.attempts} attempts")
                return await self.ops.fail(op, error)
            op = await self.ops.update(op, state=OpState.RUNNING, attempts=op.attempts + 1)
            return await self._run_claimed(op)

    async def _run_claimed(self, op: Operation) -> Operation:
        bound = log.bind(op=op.op_id, kind=op.kind.value, attempt=op.attempts)
        try:
            return await self._execute(op)
        except SluiceError as error:
            bound.info("operation failed", code=error.code.value, error=error.message)
            return await self.ops.fail(await self._latest(op), error)
        except Exception:
            bound.exception("operation crashed")
            return await self.ops.fail(
                await self._latest(op), SluiceError(ErrorCode.INTERNAL, INTERNAL_MESSAGE)
            )

    async def _latest(self, op: Operation) -> Operation:
        return await self.ops.get(op.op_id) or op

    async def _execute(self, op: Operation) -> Operation:
        if op.kind is OpKind.REGISTER:
            op, record = await self.registrar.run(op)
            message = (
                zero_workers_message(record.model_name, record.version) if not record.min_workers else ""
            )
            return await self.ops.finish(op, 200, message)
        model = str(op.params["model_name"])
        version = op.params.get("version") or None
        await self.remover.run(model, version)
        return await self.ops.finish(op, 200, unregistered_message(model))
