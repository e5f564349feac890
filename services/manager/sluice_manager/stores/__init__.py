"""What the manager's domain code reads and writes, as stores rather than a Redis client: the
registry (its one writer, :class:`sluice.registry.store.RegistryStore`), the workers' state, the
per-model locks, the version job streams and the control-plane operation records. Built once from a
Redis client where the manager is wired (app, task worker) and passed down.

The bottom layer of the manager's domain: ``api`` -> ``operations`` -> ``models`` -> ``stores``
(``scripts/check_boundaries.py`` checks that no import goes the other way)."""

from dataclasses import dataclass

import redis.asyncio as aioredis
from sluice.registry.store import RegistryStore

from sluice_manager.stores.locks import ModelLocks
from sluice_manager.stores.operations import OperationStore
from sluice_manager.stores.queued_jobs import QueuedJobs
from sluice_manager.supervision.worker_state import WorkerStateStore


@dataclass(frozen=True)
class Stores:
    registry: RegistryStore
    workers: WorkerStateStore
    locks: ModelLocks
    jobs: QueuedJobs
    operations: OperationStore

    @classmethod
    def on(cls, redis: "aioredis.Redis") -> "Stores":
        return cls(
            RegistryStore(redis), WorkerStateStore(redis), ModelLocks(redis), QueuedJobs(redis),
            OperationStore(redis),
        )  # fmt: skip
