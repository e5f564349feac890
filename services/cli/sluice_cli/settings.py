"""What the CLI reads from ``config.properties`` / ``SLUICE_*``: where the services will listen, which
Redis to use, how long startup may take. Built once in :func:`sluice_cli.main.main`."""

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, ClassVar
from urllib.parse import quote

from sluice.auth.settings import AuthSettings
from sluice.redis.target import is_shared, with_password
from sluice.transport.tls import TlsSettings
from sluice.typed import Bounds, NonNegativeInt, PositiveFloat

# A port to listen on or connect to (never 0: the CLI must know it).
FixedPort = Annotated[int, Bounds(ge=1, le=65535)]

LOOPBACK = "127.0.0.1"


@dataclass(init=False, kw_only=True)
class CliSettings(AuthSettings, TlsSettings):
    TS_KEYS: ClassVar[dict[str, str]] = {
        # disable_token_authorization, sluice_key_file: where the manager writes the keys.
        **AuthSettings.TS_KEYS,
        **TlsSettings.TS_KEYS,
        "grpc_inference_address": "grpc_inference_address",
        "grpc_inference_port": "grpc_inference_port",
        "grpc_management_address": "grpc_management_address",
        "grpc_management_port": "grpc_management_port",
        "inference_address": "inference_address",
        "management_address": "management_address",
        "model_store": "model_store",
        "load_models": "load_models",
        "default_startup_timeout": "default_startup_timeout_s",
        "sluice_redis_url": "external_redis_url",
        "sluice_redis_port": "redis_port",
        "sluice_worker_stop_timeout_s": "worker_stop_timeout_s",
        "sluice_log_max_bytes": "log_max_bytes",
        "sluice_log_backups": "log_backups",
    }

    grpc_inference_address: str = LOOPBACK
    grpc_inference_port: FixedPort = 7070
    grpc_management_address: str = LOOPBACK
    grpc_management_port: FixedPort = 7071
    inference_address: str = "http://127.0.0.1:8080"
    management_address: str = "http://127.0.0.1:8081"
    model_store: Path | None = None
    load_models: str = ""
    default_startup_timeout_s: Annotated[int, Bounds(ge=1)] = 120
    # An existing Redis to use; empty (and no Sentinels listed): `sluice start` runs a private one on
    # redis_port.
    external_redis_url: str = ""
    redis_port: FixedPort = 6399
    worker_stop_timeout_s: PositiveFloat = 30.0
    # Rotation of the logs under <home>/logs (TorchServe's log4j2.xml: 100 MB, 5 files); 0: never.
    log_max_bytes: NonNegativeInt = 100 * 1024 * 1024
    log_backups: NonNegativeInt = 5
    # Runtime folder (SLUICE_HOME): pid file, logs, Redis data, unpacked models.
    home: Path = Path("var")

    def service_redis_url(self, socket: Path | None = None, password: str = "") -> str:
        """The Redis the services are told to use (SLUICE_REDIS_URL of the children): the external one,
        else the private one with its ``password``, through its unix ``socket`` when it has one (a
        loopback TCP round trip costs more CPU and latency on every job; its TCP port stays open for
        tools)."""
        if not self.private_redis:
            return (
                self.redis_url
                if is_shared(self.redis_url)
                else with_password(self.external_redis_url, self.redis_password)
            )
        credentials = f":{quote(password, safe='')}@" if password else ""
        if socket is not None:
            return f"unix://{credentials}{socket}?db=0"
        return f"redis://{credentials}{LOOPBACK}:{self.redis_port}/0"

    @property
    def private_redis(self) -> bool:
        """Whether ``sluice start`` runs its own Redis: no external Redis, Sentinels or Cluster are set."""
        return not self.external_redis_url and not is_shared(self.redis_url)

    @property
    def gateway_target(self) -> str:
        """Where to reach the gateway's gRPC port from this host."""
        host = self.grpc_inference_address
        if host in ("0.0.0.0", "::", ""):
            host = LOOPBACK
        return f"{host}:{self.grpc_inference_port}"
