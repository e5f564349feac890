"""TorchServe 0.12 from its own venv (``bench/.torchserve-venv``, see ``bench.tools``), started as
its docs say: ``torchserve --start --ncs --disable-token-auth --model-store S --models ... --ts-config C``,
with Java 17. Its pid file and temp files go to a private TMPDIR, its logs to the work folder."""

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from bench.servers.common import (
    Ports,
    StartTiming,
    config_properties,
    log_tail,
    ping_healthy,
    predict_ok,
    wait_until,
)

START_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 60.0


@dataclass
class TorchServeServer:
    venv: Path
    workdir: Path
    store: Path
    ports: Ports = field(default_factory=Ports.free)
    name: str = "torchserve"
    # Set in the environment of the frontend, which passes it on to its workers (OMP_NUM_THREADS=1).
    extra_env: dict[str, str] = field(default_factory=dict)
    # More config.properties keys (metrics_mode, metrics_config, ...).
    properties: dict[str, str] = field(default_factory=dict)
    _java: psutil.Process | None = None

    @property
    def tmpdir(self) -> Path:
        return self.workdir / "tmp"

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["TMPDIR"] = str(self.tmpdir)
        env["VIRTUAL_ENV"] = str(self.venv)
        env.pop("TS_CONFIG_FILE", None)
        env.update(self.extra_env)
        return env

    def start(
        self, models: list[str], *, models_json: Mapping[str, Any] | None = None, probe: bytes | None = None
    ) -> StartTiming:
        self.tmpdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "config.properties"
        config.write_text(config_properties(self.ports, models_json, **self.properties))
        argv = [
            str(self.venv / "bin" / "torchserve"),
            "--start",
            "--ncs",
            "--disable-token-auth",
            "--model-store",
            str(self.store),
            "--ts-config",
            str(config),
        ]
        if models:
            argv += ["--models", *(f"{name}={name}.mar" for name in models)]
        log = self.workdir / "bench-start.log"
        started = time.perf_counter()
        with log.open("wb") as out:
            launcher = subprocess.Popen(
                argv, cwd=self.workdir, env=self._env(), stdout=out, stderr=subprocess.STDOUT
            )
        try:
            launcher.wait(timeout=60)
            self._java = self._find_java()
            to_healthy = wait_until(
                lambda: ping_healthy(self.ports.grpc_target, 0.2), timeout_s=START_TIMEOUT_S, abort=self._died
            )
            first = None
            if probe is not None:
                first = to_healthy + wait_until(
                    lambda: predict_ok(self.ports.grpc_target, probe, 1.0),
                    timeout_s=START_TIMEOUT_S,
                    interval_s=0.01,
                    abort=self._died,
                )
            wait_until(
                lambda: all(self.ready_workers(name) >= 1 for name in models),
                timeout_s=START_TIMEOUT_S,
                interval_s=0.05,
                abort=self._died,
            )
        except BaseException as exc:
            self.stop()
            tail = log_tail(self.workdir / "logs" / "ts_log.log")
            raise RuntimeError(f"TorchServe did not start ({exc}):\n{tail}") from exc
        return StartTiming(
            to_healthy_s=to_healthy, to_ready_s=time.perf_counter() - started, to_first_prediction_s=first
        )

    def _died(self) -> str | None:
        if self._java is not None and not self._java.is_running():
            return "the TorchServe JVM exited"
        return None

    def _find_java(self) -> psutil.Process | None:
        pid_file = self.tmpdir / ".model_server.pid"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                return psutil.Process(int(pid_file.read_text().strip()))
            except (OSError, ValueError, psutil.Error):
                time.sleep(0.05)
        return None

    def ready_workers(self, model: str) -> int:
        try:
            with urllib.request.urlopen(f"{self.ports.management_url}/models/{model}", timeout=2) as answer:
                described = json.loads(answer.read())
        except (urllib.error.URLError, OSError, ValueError):
            return 0
        return sum(
            1
            for version in described
            for worker in version.get("workers", [])
            if worker.get("status") == "READY"
        )

    def register(self, archive: str, workers: int = 1) -> None:
        """Management API: register ``archive`` synchronously with ``workers`` workers."""
        url = f"{self.ports.management_url}/models?url={archive}&initial_workers={workers}&synchronous=true"
        with urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=300) as answer:
            answer.read()

    def unregister(self, model: str) -> None:
        request = urllib.request.Request(f"{self.ports.management_url}/models/{model}", method="DELETE")
        with urllib.request.urlopen(request, timeout=120) as answer:
            answer.read()

    def stop(self) -> None:
        subprocess.run(
            [str(self.venv / "bin" / "torchserve"), "--stop"],
            cwd=self.workdir,
            env=self._env(),
            capture_output=True,
            timeout=STOP_TIMEOUT_S,
            check=False,
        )
        java, self._java = self._java, None
        if java is None:
            return
        try:
            workers = java.children(recursive=True)
            java.wait(timeout=STOP_TIMEOUT_S)
        except psutil.TimeoutExpired:
            java.kill()
        except psutil.Error:
            return
        for worker in workers:
            try:
                worker.wait(timeout=10)
            except psutil.TimeoutExpired:
                worker.kill()
            except psutil.Error:
                continue

    def processes(self) -> dict[str, list[psutil.Process]]:
        if self._java is None or not self._java.is_running():
            return {}
        roles: dict[str, list[psutil.Process]] = {"frontend": [self._java]}
        try:
            children = self._java.children(recursive=True)
        except psutil.Error:
            children = []
        for child in children:
            roles[f"worker:{_sock_label(child)}"] = [child]
        return roles


def _sock_label(process: psutil.Process) -> str:
    try:
        argv = process.cmdline()
    except psutil.Error:
        return str(process.pid)
    if "--sock-name" in argv:
        return argv[argv.index("--sock-name") + 1].rsplit(".", 1)[-1]
    return str(process.pid)
