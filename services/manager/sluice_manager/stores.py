"""What the manager's domain code reads and writes, as stores rather than a Redis client: the
registry (its one writer, :class:`sluice.registry_store.RegistryStore`), the workers' state, the
per-model locks and the version job streams. Built once from a Redis client where the manager is
wired (app, task worker) and passed down."""

from dataclasses import dataclass

import redis.asyncio as aioredis
from sluice.registry_store import RegistryStore

from sluice_manager.models.queued_jobs import QueuedJobs
from sluice_manager.operations.redis_lock import ModelLocks
from sluice_manager.supervision.worker_state import WorkerStateStore


@dataclass(frozen=True)
class Stores:
    registry: RegistryStore
    workers: WorkerStateStore
    locks: ModelLocks
    jobs: QueuedJobs

    @classmethod
    def on(cls, redis: "aioredis.Redis") -> "Stores":
        return cls(RegistryStore(redis), WorkerStateStore(redis), ModelLocks(redis), QueuedJobs(redis))
