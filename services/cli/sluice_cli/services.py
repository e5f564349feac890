"""How ``sluice start`` runs each service: command lines, environment, and the private Redis."""

import secrets
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sluice_cli.runtime import write_private
from sluice_cli.settings import LOOPBACK


@dataclass(frozen=True)
class StartOptions:
    """The start flags that reach the services (through their environment)."""

    model_store: Path | None = None
    workflow_store: Path | None = None
    models: str | None = None
    ts_config: Path | None = None
    disable_token_auth: bool = False
    enable_model_api: bool = False


def service_env(
    environ: Mapping[str, str],
    options: StartOptions,
    *,
    home: Path,
    redis_url: str,
    key_file: Path | None = None,
) -> dict[str, str]:
    """The children's environment: ours plus the settings the flags chose. The services read their own
    keys from config.properties (SLUICE_TS_CONFIG); the environment overrides it."""
    env = dict(environ)
    if key_file is not None:
        # Absolute, so the manager writes the keys where this command was run (TorchServe's cwd).
        env["SLUICE_KEY_FILE"] = str(key_file)
    env["SLUICE_HOME"] = str(home)
    env["SLUICE_REDIS_URL"] = redis_url
    env.setdefault("PYTHONUNBUFFERED", "1")
    if options.ts_config is not None:
        env["SLUICE_TS_CONFIG"] = str(options.ts_config)
    if options.model_store is not None:
        env["SLUICE_MODEL_STORE"] = str(options.model_store)
    if options.workflow_store is not None:
        env["SLUICE_WORKFLOW_STORE"] = str(options.workflow_store)
    if options.models is not None:
        env["SLUICE_LOAD_MODELS"] = options.models
    # --disable-token-auth / --enable-model-api can only switch auth off / the model API on.
    if options.disable_token_auth:
        env["SLUICE_DISABLE_TOKEN_AUTHORIZATION"] = "true"
    if options.enable_model_api:
        env["SLUICE_ENABLE_MODEL_API"] = "true"
    return env


def python_service(module: str) -> list[str]:
    return [sys.executable, "-m", module]


def write_redis_config(path: Path) -> str:
    """A new password for the private Redis, written as its ``requirepass`` to ``path`` (mode 0600).

    A file rather than a flag: any local user can read a process's command line, not its files or
    environment. Without a password any local user could reach the TCP port, write the registry and
    so run code as this user. A new one on every start.
    """
    password = secrets.token_urlsafe(32)
    write_private(path, f"requirepass {password}\n")
    return password


def redis_command(port: int, data_dir: Path, config: Path, socket: Path | None = None) -> list[str]:
    """A private redis-server: its password from ``config``, loopback only (and ``socket``, for this
    user only), protected mode, AOF on, never evicts (an eviction policy could delete job streams),
    logs to stdout (our log file)."""
    unix = ["--unixsocket", str(socket), "--unixsocketperm", "700"] if socket is not None else []
    return [
        "redis-server", str(config),
        "--port", str(port),
        "--bind", LOOPBACK,
        "--protected-mode", "yes",
        "--dir", str(data_dir),
        "--appendonly", "yes",
        "--appendfsync", "everysec",
        "--save", "",
        "--maxmemory-policy", "noeviction",
        "--daemonize", "no",
        "--logfile", "",
        *unix,
    ]  # fmt: skip


def port_in_use(host: str, port: int) -> bool:
    """Whether something listens on ``host:port``. With ``SO_REUSEADDR`` (which redis-server, grpc
    and aiohttp set on their listeners too) the bind fails only for a listener, not for connections
    of a stopped server left in TIME-WAIT: a `sluice start` right after `sluice stop` works."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return True
    return False


def clear_redis_data(data_dir: Path) -> None:
    """``--ncs``: start the private Redis empty (no models from an earlier run are restored)."""
    for child in data_dir.glob("*"):
        if child.is_dir():
            for inner in child.glob("*"):
                inner.unlink(missing_ok=True)
            child.rmdir()
        else:
            child.unlink(missing_ok=True)
