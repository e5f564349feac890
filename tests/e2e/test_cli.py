"""``sluice start`` / ``sluice stop`` as a user runs them: real redis-server, manager, gateway and
worker processes, the demo model, free ports chosen through config.properties."""

import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import psutil
import pytest
import redis
from grpc_health.v1 import health_pb2, health_pb2_grpc
from sluice.lifecycle.worker_standby import STANDBY_FLAG
from sluice.redis import keys
from sluice.v1 import torchserve_inference_pb2 as inference_pb2
from sluice.v1 import torchserve_inference_pb2_grpc as inference_grpc
from sluice_worker.demo_model import write_archive

from tests.support.redis_server import free_port

SLUICE = Path(sys.executable).parent / "sluice"
START_TIMEOUT_S = 240


@dataclass(frozen=True)
class Site:
    """A folder to run `sluice` in: config.properties with free ports, a model store with demo.mar."""

    root: Path
    grpc_port: int
    redis_port: int

    @property
    def home(self) -> Path:
        return self.root / "var"

    def run(self, *args: str, timeout_s: float = START_TIMEOUT_S) -> "subprocess.CompletedProcess[str]":
        return subprocess.run(
            [str(SLUICE), *args],
            cwd=self.root,
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )

    @property
    def key_file(self) -> Path:
        """Where the manager writes the token keys: the folder `sluice start` ran in, as TorchServe."""
        return self.root / "key_file.json"

    def inference_metadata(self) -> tuple[tuple[str, str]]:
        key = json.loads(self.key_file.read_text())["inference"]["key"]
        return (("authorization", f"Bearer {key}"),)

    def pid_file(self) -> dict[str, object]:
        loaded: dict[str, object] = json.loads((self.home / "sluice.pid").read_text())
        return loaded

    def pid_of(self, name: str) -> int:
        processes = self.pid_file()["processes"]
        assert isinstance(processes, list)
        return next(int(entry["pid"]) for entry in processes if entry["name"] == name)

    def service_pids(self) -> list[int]:
        processes = self.pid_file()["processes"]
        assert isinstance(processes, list)
        return [int(entry["pid"]) for entry in processes]

    def descendants(self) -> list[psutil.Process]:
        """Every process the services started (workers, the standby worker, Celery's pool)."""
        found = []
        for pid in self.service_pids():
            with contextlib.suppress(psutil.Error):
                found += psutil.Process(pid).children(recursive=True)
        return found

    def redis(self) -> "redis.Redis":
        """The private Redis, as the services reach it (the URL in the pid file has its password)."""
        return redis.Redis.from_url(str(self.pid_file()["redis_url"]), socket_timeout=5)

    def worker_pids(self) -> list[int]:
        client = self.redis()
        try:
            return [int(json.loads(raw)["handle"]) for raw in client.hgetall(keys.LAUNCHED_WORKERS).values()]
        finally:
            client.close()


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_") and k != "TS_CONFIG_FILE"}
    env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    built = Site(tmp_path, free_port(), free_port())
    (tmp_path / "config.properties").write_text(
        f"grpc_inference_port={built.grpc_port}\n"
        f"grpc_management_port={free_port()}\n"
        f"management_address=http://127.0.0.1:{free_port()}\n"
        f"inference_address=http://127.0.0.1:{free_port()}\n"
        f"metrics_address=http://127.0.0.1:{free_port()}\n"
        f"sluice_redis_port={built.redis_port}\n"
        "sluice_worker_stop_timeout_s=10\n"
    )
    write_archive(tmp_path / "store")
    yield built
    # Whatever a failed test left running.
    if (built.home / "sluice.pid").exists():
        built.run("stop", timeout_s=120)


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def standbys(site: Site, besides: int) -> list[int]:
    found = []
    for process in site.descendants():
        with contextlib.suppress(psutil.Error):
            if STANDBY_FLAG in process.cmdline() and process.pid != besides:
                found.append(process.pid)
    return found


def wait_dead(pids: list[int], timeout_s: float = 10) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(alive(pid) for pid in pids):
        time.sleep(0.1)
    return [pid for pid in pids if alive(pid)]


def serving(port: int) -> bool:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


def predict(port: int, data: bytes, metadata: tuple[tuple[str, str], ...] = ()) -> str:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = inference_grpc.InferenceAPIsServiceStub(channel)
        reply = stub.Predictions(
            inference_pb2.PredictionsRequest(model_name="demo", input={"data": data}),
            metadata=metadata,
            timeout=30,
        )
    return str(reply.prediction.decode())


def test_start_serve_stop_leaves_nothing_running(site: Site) -> None:
    started = site.run("start", "--model-store", "store", "--models", "demo=demo.mar")
    assert started.returncode == 0, started.stderr + started.stdout
    out = started.stdout
    assert "Sluice is serving." in out
    assert f"127.0.0.1:{site.grpc_port}" in out
    # The services reach the private Redis through its unix socket; its TCP port stays open for tools.
    socket = site.home / "redis" / "redis.sock"
    assert f"unix://:***@{socket}?db=0" in out
    assert f"also on 127.0.0.1:{site.redis_port} with the password in {site.home / 'redis.conf'}" in out
    assert "demo 1.0: 1 worker(s) READY (min 1)" in out
    assert str(site.home / "sluice.pid") in out
    assert "Traceback" not in started.stderr

    assert serving(site.grpc_port)
    # The private Redis needs its password, which only this user's files and environments hold.
    password = (site.home / "redis.conf").read_text().split()[1]
    for private in (site.home / "redis.conf", site.home / "sluice.pid"):
        assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert password not in out + started.stderr
    assert password not in (site.home / "logs" / "manager.log").read_text()
    assert all(password not in " ".join(psutil.Process(pid).cmdline()) for pid in site.service_pids())
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=site.redis_port, socket_timeout=5).ping()
    clients = site.redis().client_list()
    through_socket = [c for c in clients if c["addr"].startswith("/")]  # TCP: "127.0.0.1:port"
    # Manager and gateway (control connections, hot path, reply reader), the worker's hot path.
    assert len(through_socket) >= 4, clients
    # Token authorization is on by default: key_file.json (0600) in the folder `sluice start` ran in.
    assert stat.S_IMODE(site.key_file.stat().st_mode) == 0o600
    assert set(json.loads(site.key_file.read_text())) == {"management", "inference", "API"}
    assert str(site.key_file) in out
    with pytest.raises(grpc.RpcError) as refused:
        predict(site.grpc_port, b"[5.1, 3.5, 1.4, 0.2]")
    assert refused.value.code() is grpc.StatusCode.PERMISSION_DENIED
    answer = json.loads(predict(site.grpc_port, b"[5.1, 3.5, 1.4, 0.2]", site.inference_metadata()))
    assert answer["label"] in {"setosa", "versicolor", "virginica"}
    assert len(answer["probabilities"]) == 3

    again = site.run("--start", "--model-store", "store", "--models", "demo=demo.mar")
    assert again.returncode == 1
    assert "already running" in again.stderr

    pids = site.service_pids() + site.worker_pids()
    assert len(pids) == 4
    # The demo worker began as the manager's standby (torch imported ahead); a new standby follows.
    [worker] = site.worker_pids()
    assert STANDBY_FLAG in psutil.Process(worker).cmdline()
    deadline = time.monotonic() + 20
    while len(standbys(site, besides=worker)) != 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(standbys(site, besides=worker)) == 1, site.descendants()
    pids += [p.pid for p in site.descendants()]
    stopped = site.run("--stop", timeout_s=120)
    assert stopped.returncode == 0, stopped.stderr
    assert "Sluice stopped." in stopped.stdout
    assert wait_dead(pids) == []
    assert not (site.home / "sluice.pid").exists()
    assert not site.key_file.exists()  # deleted at stop, as TorchServe does
    assert site.run("stop").stdout.strip() == "Sluice is not running."


def test_stop_after_the_manager_was_killed_leaves_nothing_running(site: Site) -> None:
    started = site.run("start", "--model-store", "store", "--models", "demo=demo.mar", "--disable-token-auth")
    assert started.returncode == 0, started.stderr + started.stdout
    [worker] = site.worker_pids()
    assert STANDBY_FLAG in psutil.Process(worker).cmdline()  # a worker that began as the standby
    manager = site.pid_of("manager")
    others = [p.pid for p in site.descendants() if p.pid != worker]
    os.kill(manager, signal.SIGKILL)
    assert wait_dead([manager]) == []
    assert alive(worker)  # workers outlive their manager (a new one would adopt them)
    stopped = site.run("stop", timeout_s=120)
    assert stopped.returncode == 0, stopped.stderr
    # `sluice stop` finds the worker from its launch record; the standby ended with its manager.
    assert wait_dead([worker, *others]) == []


def start_foreground(site: Site) -> "subprocess.Popen[str]":
    """`sluice start --foreground`, returned once it says it is serving."""
    process = subprocess.Popen(
        [str(SLUICE), "start", "--foreground", "--model-store", "store", "--models", "demo.mar", "--ncs"],
        cwd=site.root,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    lines = []
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        lines.append(line)
        if "Ctrl-C stops Sluice" in line or not line:
            break
    assert any("Sluice is serving." in line for line in lines), "".join(lines)
    return process


@pytest.mark.parametrize("how", ["ctrl-c", "sluice stop"])
def test_foreground_stops_in_order(site: Site, how: str) -> None:
    process = start_foreground(site)
    try:
        pids = site.service_pids() + site.worker_pids()
        assert serving(site.grpc_port)
        if how == "ctrl-c":
            process.send_signal(signal.SIGINT)
        else:
            stopped = site.run("stop", timeout_s=150)
            assert stopped.returncode == 0, stopped.stderr
        rest, _ = process.communicate(timeout=120)
        assert process.returncode == 0, rest
        assert "Sluice stopped." in rest
        assert "Traceback" not in rest
        assert wait_dead(pids) == []
        assert not (site.home / "sluice.pid").exists()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_model_that_cannot_load_fails_start_with_its_log(site: Site) -> None:
    broken = site.root / "store" / "broken.mar"
    with zipfile.ZipFile(broken, "w") as archive:
        archive.writestr("handler.py", "def handle(data, context):\n    raise RuntimeError('boom at load')\n")
        archive.writestr(
            "MAR-INF/MANIFEST.json",
            json.dumps({"runtime": "python", "model": {"modelName": "broken", "handler": "handler.py",
                                                       "modelVersion": "1.0"}}),
        )  # fmt: skip
    result = site.run("start", "--model-store", "store", "--models", "broken.mar")
    assert result.returncode == 1
    assert "could not start: the workers of model broken 1.0 keep failing to start" in result.stderr
    assert "boom at load" in result.stderr, "the worker's log tail is shown"
    assert "--- last lines of" in result.stderr
    assert not (site.home / "sluice.pid").exists()
    leftovers = [
        p.pid for p in psutil.process_iter(["cmdline"]) if str(site.home) in " ".join(p.info["cmdline"] or [])
    ]
    assert wait_dead(leftovers) == []


def test_a_bad_archive_fails_start_with_the_reason(site: Site) -> None:
    (site.root / "store" / "evil.mar").write_bytes(b"not a zip")
    result = site.run("start", "--model-store", "store", "--models", "evil.mar")
    assert result.returncode == 1
    assert "evil.mar: Invalid model archive evil.mar: not a readable zip archive" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (site.home / "sluice.pid").exists()
