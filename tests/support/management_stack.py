"""A manager process (management API on free ports) for tests that talk to it as TorchServe clients do:
gRPC on ``grpc_port``, REST on ``rest_url``. Imports no ``sluice.v1`` module (the compat tier uses it).
"""

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support import stack
from tests.support.redis_server import free_port


@dataclass
class Manager:
    service: stack.Service
    grpc_port: int
    rest_url: str

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"


def manager_env(redis_url: str, root: Path, **settings: str) -> dict[str, str]:
    env = {
        "SLUICE_REDIS_URL": redis_url,
        "SLUICE_HOME": str(root / "home"),
        "SLUICE_MODEL_STORE": str(root / "store"),
        "SLUICE_LOAD_MODELS": "",
        "SLUICE_ENABLE_MODEL_API": "true",
        # These stacks test the management API, not tokens (the token tests do).
        "SLUICE_DISABLE_TOKEN_AUTHORIZATION": "true",
        # Where the key file goes when a test switches token authorization on (never the cwd).
        "SLUICE_KEY_FILE": str(root / "key_file.json"),
        "SLUICE_RECONCILE_INTERVAL_S": "0.2",
        "SLUICE_HEARTBEAT_GRACE_S": "1.5",
        "SLUICE_WORKER_STOP_TIMEOUT_S": "10",
        "SLUICE_TASK_ORPHAN_AFTER_S": "2",
        "TS_CONFIG_FILE": "",
        "SLUICE_TS_CONFIG": "",
    }
    env.update({f"SLUICE_{key.upper()}": value for key, value in settings.items()})
    return env


def start_manager(
    redis_url: str, root: Path, *, grpc_port: int = 0, rest_port: int = 0, log_name: str = "manager.log",
    **settings: str,
) -> Manager:  # fmt: skip
    """Start ``python -m sluice_manager`` and wait until its REST port answers."""
    grpc_port = grpc_port or free_port()
    rest_url = f"http://127.0.0.1:{rest_port or free_port()}"
    env = manager_env(redis_url, root, **settings)
    env["SLUICE_GRPC_MANAGEMENT_PORT"] = str(grpc_port)
    env["SLUICE_MANAGEMENT_ADDRESS"] = rest_url
    service = stack.Service("sluice_manager", [], env, root / "logs" / log_name)
    manager = Manager(service, grpc_port, rest_url)
    wait_answering(manager)
    return manager


def wait_answering(manager: Manager, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not manager.service.alive():
            raise AssertionError(f"the manager exited:\n{manager.service.log()}")
        try:
            with urllib.request.urlopen(f"{manager.rest_url}/api-description", timeout=1) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.1)
    raise AssertionError(f"the management API did not answer:\n{manager.service.log()}")


@dataclass
class HttpAnswer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def http(
    method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None
) -> HttpAnswer:
    """One plain HTTP call (as curl makes it); errors are answers too."""
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=180) as answer:
            return HttpAnswer(answer.status, {k.lower(): v for k, v in answer.headers.items()}, answer.read())
    except urllib.error.HTTPError as error:
        return HttpAnswer(error.code, {k.lower(): v for k, v in error.headers.items()}, error.read())


@dataclass
class Stack:
    """Redis, a manager (real ``sluice_worker`` workers) and a gateway, for management API tests."""

    root: Path
    redis_url: str
    manager: Manager
    gateway: stack.Service
    gateway_port: int
    store: Path

    @property
    def gateway_target(self) -> str:
        return f"127.0.0.1:{self.gateway_port}"

    def stop(self) -> None:
        for service in (self.gateway, self.manager.service):
            service.stop()


def start_stack(root: Path, redis_url: str, **manager_settings: str) -> Stack:
    store = root / "store"
    store.mkdir(parents=True, exist_ok=True)
    manager = start_manager(redis_url, root, grpc_port=0, rest_port=0, **manager_settings)
    gateway, port = stack.start_gateway(redis_url, root / "logs", registry_cache_ttl_s="1")
    return Stack(root, redis_url, manager, gateway, port, store)
