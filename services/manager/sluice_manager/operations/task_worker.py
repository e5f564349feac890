"""``python -m sluice_manager.operations.task_worker``: the manager's Celery worker, a child of the
manager process (:mod:`sluice_manager.operations.task_process` starts it). Same settings as the
manager (SLUICE_* environment and config.properties); each task runs one control-plane operation on
its own event loop.
"""

import asyncio
import os
import socket
import sys

from sluice.log import configure_logging, get_logger
from sluice.redis.client import connect
from sluice.settings.common import describe_error
from sluice.typed import InvalidValue

from sluice_manager.models.fetch import settings_download
from sluice_manager.models.registration import registration_config
from sluice_manager.models.removal import RemovalConfig
from sluice_manager.operations.celery_app import QUEUE, celery_app, register_task
from sluice_manager.operations.op_runner import OperationRunner, RunnerConfig
from sluice_manager.operations.task_process import die_with_parent
from sluice_manager.settings import ManagerSettings

log = get_logger("sluice_manager.operations.task_worker")


def runner_config(settings: ManagerSettings) -> RunnerConfig:
    removal = RemovalConfig(
        models_dir=settings.models_path,
        unregister_timeout_s=settings.unregister_model_timeout_s,
        lock_wait_s=settings.model_lock_wait_s,
    )
    return RunnerConfig(registration_config(settings), removal, max_attempts=settings.task_max_attempts)


class _Tasks:
    """What each task does: one event loop and one Redis client per operation (prefork children
    run tasks one at a time; nothing async outlives a task)."""

    def __init__(self, settings: ManagerSettings) -> None:
        self.settings = settings
        self.config = runner_config(settings)

    def run(self, op_id: str) -> None:
        asyncio.run(self._run(op_id))

    async def _run(self, op_id: str) -> None:
        redis = connect(self.settings.redis_url)
        try:
            runner = OperationRunner(redis, self.config, download=settings_download(self.settings))
            await runner.run(op_id)
        finally:
            await redis.aclose()


def worker_argv(settings: ManagerSettings) -> list[str]:
    return [
        "worker",
        "--pool=prefork",
        f"--concurrency={settings.task_concurrency}",
        f"--queues={QUEUE}",
        f"--hostname=sluice-manager-{os.getpid()}@{socket.gethostname()}",
        f"--loglevel={settings.log_level.upper()}",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        "--optimization=fair",
    ]


def main() -> int:
    die_with_parent(os.environ)
    try:
        settings = ManagerSettings()
    except InvalidValue as exc:
        print(f"sluice manager tasks: {describe_error(exc)}", file=sys.stderr)
        return 2
    configure_logging("manager-tasks", settings.log_format, settings.log_level)
    app = celery_app(settings.redis_url, visibility_timeout_s=settings.task_visibility_timeout_s)
    register_task(app, _Tasks(settings).run)
    log.info("control-plane task worker starting", concurrency=settings.task_concurrency)
    app.worker_main(worker_argv(settings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
