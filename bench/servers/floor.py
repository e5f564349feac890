"""The gRPC floor as a server under test: ``bench.servers.floor_main`` in its own process on free
loopback ports, answering every ``Predictions`` with the bytes Sluice answered the same request with.

It runs head to head beside Sluice and TorchServe: Sluice's C=1 latency and best throughput are read
against it, since no gateway built on grpc.aio can answer faster than a grpc.aio server that does
nothing."""

import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from bench.servers.common import Ports, StartTiming, log_tail, ping_healthy, wait_until

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0


@dataclass
class FloorServer:
    workdir: Path
    answer: bytes
    ports: Ports = field(default_factory=Ports.free)
    name: str = "floor"
    _process: subprocess.Popen[bytes] | None = None

    def start(
        self, models: list[str], *, models_json: Mapping[str, Any] | None = None, probe: bytes | None = None
    ) -> StartTiming:
        """Starts the server; it serves no models, so ``models`` and the rest are not used."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        answer = self.workdir / "answer.bin"
        answer.write_bytes(self.answer)
        log = self.workdir / "floor.log"
        argv = [sys.executable, "-m", "bench.servers.floor_main", "--port", str(self.ports.grpc)]
        with log.open("wb") as out:
            self._process = subprocess.Popen(
                [*argv, "--answer", str(answer)], stdout=out, stderr=subprocess.STDOUT
            )
        process = self._process

        def failed() -> str | None:
            code = process.poll()
            return None if code is None else f"the floor server exited with {code}:\n{log_tail(log)}"

        try:
            to_healthy = wait_until(
                lambda: ping_healthy(self.ports.grpc_target, 0.2), timeout_s=START_TIMEOUT_S, abort=failed
            )
        except BaseException:
            self.stop()
            raise
        return StartTiming(to_healthy_s=to_healthy, to_ready_s=to_healthy)

    def stop(self) -> None:
        if self._process is None:
            return
        self._process.terminate()
        try:
            self._process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(timeout=STOP_TIMEOUT_S)
        self._process = None

    def processes(self) -> dict[str, list[psutil.Process]]:
        if self._process is None or self._process.poll() is not None:
            return {}
        try:
            return {"gateway": [psutil.Process(self._process.pid)]}
        except psutil.Error:
            return {}
