"""A real redis-server for tests: its own free port (and a unix socket in its data dir) and data dir,
AOF on, killable and restartable."""

import contextlib
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import redis
from sluice_cli.runtime import MAX_SOCKET_PATH

# Ports are chosen below Linux's ephemeral range (32768-60999): a port the kernel may give any
# outgoing connection between our choice and the server's bind was seen to collide in CI.
_PORT_RANGE = (20000, 32767)
_given: set[int] = set()


def free_port() -> int:
    """A loopback port nothing listens on, not handed out before by this process."""
    rng = random.Random()
    for _ in range(200):
        port = rng.randint(*_PORT_RANGE)
        if port in _given:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _given.add(port)
        return port
    raise RuntimeError(f"no free port in {_PORT_RANGE} after 200 tries")


class RedisServer:
    """``redis-server`` bound to 127.0.0.1 on a free port, with AOF (appendfsync always) in ``data_dir``."""

    def __init__(self, data_dir: Path, *, appendonly: bool = True, extra_args: Sequence[str] = ()) -> None:
        if shutil.which("redis-server") is None:
            raise RuntimeError("redis-server is not on PATH")
        self.data_dir = data_dir
        self.appendonly = appendonly
        self.extra_args = list(extra_args)
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def socket_path(self) -> Path | None:
        """The unix socket, unless the data dir's path is too long for one."""
        path = self.data_dir / "redis.sock"
        return path if len(str(path)) <= MAX_SOCKET_PATH else None

    def unix_url(self, db: int = 0) -> str:
        if self.socket_path is None:
            raise RuntimeError(f"{self.data_dir} is too long a path for a unix socket")
        return f"unix://{self.socket_path}?db={db}"

    def start(self, timeout_s: float = 10.0) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        args = [
            "redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.data_dir),
            "--save", "", "--appendonly", "yes" if self.appendonly else "no", "--appendfsync", "always",
            "--maxmemory-policy", "noeviction", "--daemonize", "no",
            "--logfile", str(self.data_dir / "redis.log"),
        ]  # fmt: skip
        if self.socket_path is not None:
            args += ["--unixsocket", str(self.socket_path), "--unixsocketperm", "700"]
        args += self.extra_args
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if redis.Redis(port=self.port, socket_timeout=0.5).ping():
                    return
            except redis.RedisError:
                time.sleep(0.05)
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout_s: float = 10.0) -> None:
        if self.process is None:
            return
        self.process.send_signal(sig)
        self.process.wait(timeout=timeout_s)
        self.process = None

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def restart(self, down_s: float = 0.0) -> None:
        self.stop()
        time.sleep(down_s)
        self.start()


@contextlib.contextmanager
def redis_with_socket() -> Iterator[RedisServer]:
    """A running RedisServer in a short temporary folder, so that it has its unix socket."""
    with tempfile.TemporaryDirectory(prefix="sl-") as folder:
        server = RedisServer(Path(folder))
        server.start()
        try:
            yield server
        finally:
            server.stop()
