"""The management API as one piece of the manager: its domain service, its two servers (gRPC on
``grpc_management_address:grpc_management_port``, REST on ``management_address``), the Celery task
worker child that runs long operations, the sweep that resubmits orphaned operations and the
registry-event listener that wakes the reconcile loop.

Seams for token authorization and the model-API switch: ``grpc_interceptors`` and
``rest_middlewares`` wrap every call; ``rest_routes`` adds routes (``/token``).
"""

import asyncio
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from aiohttp import web
from sluice.lifecycle.cancellation import cancel_and_wait
from sluice.log import get_logger
from sluice.transport.http_listener import HttpListener, parse_address
from sluice.transport.tls import rest_context

from sluice_manager.api.describe_job import DescribeJobs
from sluice_manager.api.grpc_api.server import ManagementGrpcServer
from sluice_manager.api.management import ManagementConfig, ManagementService
from sluice_manager.api.rest_api.server import create_app
from sluice_manager.api.rest_api.workflow_routes import WorkflowRoutes
from sluice_manager.api.version_views import MeasureUsage, no_usage
from sluice_manager.api.workflows import WorkflowConfig, WorkflowService
from sluice_manager.models.fetch import settings_download
from sluice_manager.models.registration import registration_config
from sluice_manager.operations.celery_app import celery_app
from sluice_manager.operations.task_client import TaskClient
from sluice_manager.operations.task_process import TaskWorkerProcess
from sluice_manager.settings import ManagerSettings
from sluice_manager.stores import Stores
from sluice_manager.supervision.registry_events import wake_on_events

log = get_logger(__name__)

TASK_WORKER_MODULE = "sluice_manager.operations.task_worker"


@dataclass(frozen=True)
class ApiSeams:
    grpc_interceptors: Sequence[Any] = ()
    rest_middlewares: Sequence[Any] = ()
    rest_routes: Sequence[web.RouteDef] = ()


def management_config(settings: ManagerSettings, host: str) -> ManagementConfig:
    return ManagementConfig(
        host=host,
        model_api_enabled=settings.enable_model_api,
        lock_wait_s=settings.model_lock_wait_s,
        operation_timeout_s=settings.task_visibility_timeout_s,
        unregister_timeout_s=settings.unregister_model_timeout_s,
    )


class ManagementApi:
    def __init__(
        self,
        settings: ManagerSettings,
        redis: "aioredis.Redis",
        *,
        host: str,
        wake: Callable[[], None],
        environ: Mapping[str, str],
        seams: ApiSeams = ApiSeams(),
        measure_usage: MeasureUsage = no_usage,
    ) -> None:
        self.settings = settings
        self._redis = redis
        self._wake = wake
        self.celery = celery_app(settings.redis_url, visibility_timeout_s=settings.task_visibility_timeout_s)
        stores = Stores.on(redis)
        self.tasks = TaskClient(self.celery, stores.operations, orphan_after_s=settings.task_orphan_after_s)
        self.task_worker = TaskWorkerProcess(
            command=[sys.executable, "-m", TASK_WORKER_MODULE],
            env=environ,
            log_path=settings.logs_path / "manager-tasks.log",
            stop_timeout_s=settings.worker_stop_timeout_s,
        )
        self.service = ManagementService(
            stores,
            management_config(settings, host),
            submit=self.tasks.submit,
            describe_jobs=DescribeJobs(redis, settings.redis_url),
            wake=wake,
            measure_usage=measure_usage,
        )
        self.grpc = ManagementGrpcServer(
            self.service,
            host=settings.grpc_management_address,
            port=settings.grpc_management_port,
            max_request_size=settings.max_request_size,
            interceptors=seams.grpc_interceptors,
            tls=settings,
        )
        self.workflows = WorkflowService(
            self.service,
            WorkflowConfig(
                workflow_store=settings.workflow_store or settings.model_store,
                models_dir=settings.models_path,
                limits=registration_config(settings).limits,
                lock_wait_s=settings.model_lock_wait_s,
            ),
            download=settings_download(settings),
        )
        app = create_app(
            self.service,
            max_request_size=settings.max_request_size,
            extra_middlewares=seams.rest_middlewares,
            extra_routes=[*WorkflowRoutes(self.workflows).routes(), *seams.rest_routes],
        )
        address = parse_address(settings.management_address)
        context = rest_context(settings, settings.management_address)
        self.http = HttpListener(
            app, address, name="management", cancel_on_disconnect=False, ssl_context=context
        )
        self._background: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Start the task worker, bind both servers (OSError if a port is taken), start the sweeps."""
        self.task_worker.start()
        grpc_port = await self.grpc.start()
        http_port = await self.http.start()
        self._background = [
            asyncio.create_task(self.tasks.sweep_forever(self.settings.task_orphan_after_s), name="op-sweep"),
            asyncio.create_task(wake_on_events(self._redis, self._wake), name="registry-events"),
        ]
        log.info(
            "management API listening",
            grpc=f"{self.settings.grpc_management_address}:{grpc_port}",
            rest=self.settings.management_address,
            rest_port=http_port,
        )

    async def stop(self, grace_s: float) -> None:
        """Stop accepting calls, let in-flight ones finish for ``grace_s``, then stop the task worker."""
        for outcome in await asyncio.gather(
            self.grpc.stop(grace_s), self.http.stop(grace_s), return_exceptions=True
        ):
            if isinstance(outcome, Exception):
                log.warning("management server did not stop cleanly", error=repr(outcome))
        await self.service.aclose()
        for task in list(self._background):
            await cancel_and_wait(task)
        await self.task_worker.stop()
