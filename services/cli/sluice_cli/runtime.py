"""The runtime folder (``SLUICE_HOME`` or ``./var``) and its pid file.

``<home>/sluice.pid`` is JSON: each process ``sluice start`` ran, with its pid, its start time as the
OS reports it and a marker from its command line, so that ``sluice stop`` never signals a process that
merely reuses an old pid.
"""

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
from pydantic import BaseModel, ValidationError

# How far a process's start time may differ from the recorded one and still be the same process.
_START_TIME_TOLERANCE_S = 1.0
# A unix socket's path must fit sun_path (108 bytes on Linux, with its NUL); keep a margin.
MAX_SOCKET_PATH = 100


@dataclass(frozen=True)
class RuntimeDir:
    home: Path

    @classmethod
    def at(cls, home: Path) -> "RuntimeDir":
        return cls(home.absolute())

    @property
    def pid_file(self) -> Path:
        return self.home / "sluice.pid"

    @property
    def logs(self) -> Path:
        return self.home / "logs"

    @property
    def redis_data(self) -> Path:
        return self.home / "redis"

    @property
    def redis_config(self) -> Path:
        """The private Redis's config file: its password (mode 0600)."""
        return self.home / "redis.conf"

    @property
    def redis_socket(self) -> Path | None:
        """The private Redis's unix socket, or None when the folder's path is too long for one."""
        path = self.redis_data / "redis.sock"
        return path if len(os.fsencode(path)) <= MAX_SOCKET_PATH else None

    def log_file(self, name: str) -> Path:
        return self.logs / f"{name}.log"

    def prepare(self) -> None:
        for folder in (self.home, self.logs, self.redis_data):
            folder.mkdir(parents=True, exist_ok=True)


class ProcessRef(BaseModel):
    """A process ``sluice start`` ran."""

    name: str
    pid: int
    start_time: float
    # A word its command line must contain ("redis-server", "sluice_manager", ...).
    marker: str
    log_file: str = ""

    def process(self) -> psutil.Process | None:
        """The live process, or None if it exited or the pid now belongs to another process."""
        try:
            process = psutil.Process(self.pid)
            if process.status() == psutil.STATUS_ZOMBIE:
                return None
            if abs(process.create_time() - self.start_time) > _START_TIME_TOLERANCE_S:
                return None
            if self.marker not in " ".join(process.cmdline()):
                return None
            return process
        except psutil.Error:
            return None

    def alive(self) -> bool:
        return self.process() is not None


class ServiceHistory(BaseModel):
    """What the supervisor saw of one service since the start."""

    restarts: int = 0
    last_exit_code: int | None = None
    last_exit_unix_ms: int | None = None
    # Why it is no longer restarted (a crash loop); empty while it is.
    given_up: str = ""


class PidFile(BaseModel):
    runtime_dir: str
    started_unix_ms: int
    redis_url: str
    # True when `sluice start` runs the Redis itself (and `sluice stop` must stop it).
    private_redis: bool
    gateway_target: str = ""
    # The gateway's gRPC port serves TLS (enable_grpc_ssl).
    gateway_tls: bool = False
    # Processes in start order; `sluice stop` goes through them in reverse.
    processes: list[ProcessRef] = []
    # The process that supervises them (the detached supervisor, or `sluice start --foreground`):
    # `sluice stop` asks it to stop them, so that nothing is restarted meanwhile.
    supervisor: ProcessRef | None = None
    history: dict[str, ServiceHistory] = {}
    # The key file the manager writes (token authorization on); `sluice stop` deletes it.
    key_file: str = ""

    @classmethod
    def new(
        cls,
        runtime: RuntimeDir,
        redis_url: str,
        *,
        private_redis: bool,
        gateway_target: str,
        gateway_tls: bool = False,
    ) -> "PidFile":
        return cls(
            runtime_dir=str(runtime.home),
            started_unix_ms=int(time.time() * 1000),
            redis_url=redis_url,
            private_redis=private_redis,
            gateway_target=gateway_target,
            gateway_tls=gateway_tls,
        )

    @classmethod
    def read(cls, path: Path) -> "PidFile | None":
        try:
            return cls.model_validate_json(path.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, ValidationError):
            # Unreadable: treat as stale (nothing we could safely signal).
            return None

    def write(self, path: Path) -> None:
        """Mode 0600: ``redis_url`` carries the private Redis's password."""
        write_private(path, self.model_dump_json(indent=2))

    def live(self) -> list[ProcessRef]:
        supervisor = [self.supervisor] if self.supervisor is not None else []
        return [ref for ref in [*supervisor, *self.processes] if ref.alive()]

    def get(self, name: str) -> ProcessRef | None:
        return next((ref for ref in self.processes if ref.name == name), None)

    def replace(self, ref: ProcessRef) -> None:
        """Put ``ref`` in the place of the process of the same name (a restart keeps the order)."""
        index = next(i for i, old in enumerate(self.processes) if old.name == ref.name)
        self.processes[index] = ref

    def history_of(self, name: str) -> ServiceHistory:
        return self.history.setdefault(name, ServiceHistory())


def write_private(path: Path, text: str) -> None:
    """Replace ``path`` with ``text``, readable by this user only."""
    temp = path.with_name(path.name + ".tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # O_CREAT leaves the mode of a file that already exists alone
    with os.fdopen(fd, "w") as file:
        file.write(text)
    os.replace(temp, path)


def this_process(name: str, marker: str) -> ProcessRef:
    return ProcessRef(name=name, pid=os.getpid(), start_time=psutil.Process().create_time(), marker=marker)


def remove_pid_file(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
