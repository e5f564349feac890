"""Driving real worker processes (``python -m sluice_worker``) against a real Redis, the way the
manager starts them and the gateway talks to them: records via ``sluice.registry.reader``, jobs XADDed to
the version's stream, replies read from a gateway reply stream."""

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import redis
import redis.asyncio as aioredis
from sluice import envelope
from sluice.envelope import Job, Reply, WireProtocol
from sluice.redis import keys
from sluice.registry.records import VersionRecord, WorkerRecord
from sluice.registry.store import RegistryStore
from sluice.v1.torchserve_inference_pb2 import PredictionResponse, PredictionsRequest

from tests.support.models import ModelSpec, write_model_dir

# Small timings so failures are detected in well under a second.
FAST_ENV = {
    "SLUICE_HEARTBEAT_INTERVAL_S": "0.2",
    "SLUICE_HEARTBEAT_TTL_S": "0.8",
    "SLUICE_CLAIM_SCAN_INTERVAL_S": "0.3",
    "SLUICE_READ_BLOCK_MS": "200",
    "SLUICE_RECORD_WAIT_S": "30",
    "SLUICE_LOG_LEVEL": "info",
    # Stopping workers of stateful models hand unsaved sequences over after a second, not 20.
    "SLUICE_SEQUENCE_DRAIN_S": "1",
}
READY_TIMEOUT_S = 60.0


async def register(client: "aioredis.Redis", spec: ModelSpec, root: Path, **fields: Any) -> VersionRecord:
    """Unpack ``spec`` under ``root`` and register it (as the manager would)."""
    model_dir = write_model_dir(spec, root / f"{spec.name}-{spec.version}")
    record = VersionRecord(
        model_name=spec.name,
        version=spec.version,
        model_url=f"{spec.name}.mar",
        model_dir=str(model_dir),
        handler=spec.handler,
        **fields,
    )
    await RegistryStore(client).add(record, make_default=True)
    return record


def register_sync(redis_url: str, spec: ModelSpec, root: Path, **fields: Any) -> VersionRecord:
    async def go() -> VersionRecord:
        client: aioredis.Redis = aioredis.Redis.from_url(redis_url)
        try:
            return await register(client, spec, root, **fields)
        finally:
            await client.aclose()

    return asyncio.run(go())


class WorkerProcess:
    def __init__(
        self,
        redis_url: str,
        model: str,
        version: str,
        log_dir: Path,
        *,
        worker_id: str | None = None,
        args: Iterable[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.redis_url = redis_url
        self.model, self.version = model, version
        self.worker_id = worker_id
        self.log_path = log_dir / f"worker-{model}-{version}-{worker_id or uuid.uuid4().hex[:6]}.log"
        self._args = list(args)
        self._env = dict(env or {})
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> "WorkerProcess":
        command = [
            sys.executable,
            "-m",
            "sluice_worker",
            "--model-name",
            self.model,
            "--model-version",
            self.version,
        ]
        command += ["--torch-threads", "1", *self._args]
        if self.worker_id is not None:
            command += ["--worker-id", self.worker_id]
        env = {**os.environ, "SLUICE_REDIS_URL": self.redis_url, **FAST_ENV, **self._env}
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> WorkerRecord:
        """Until this process's READY record appears in the version's workers hash."""
        client = redis.Redis.from_url(self.redis_url)
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                assert self.process is not None
                if self.process.poll() is not None:
                    raise AssertionError(f"worker exited with {self.process.returncode}:\n{self.log()}")
                for raw in client.hvals(keys.workers(self.model, self.version)):
                    record = WorkerRecord.from_json(raw)
                    if record.pid == self.pid:
                        self.worker_id = record.worker_id
                        return record
                time.sleep(0.05)
        finally:
            client.close()
        raise AssertionError(f"worker not ready after {timeout_s}s:\n{self.log()}")

    def send(self, sig: signal.Signals) -> None:
        assert self.process is not None
        self.process.send_signal(sig)

    def wait(self, timeout_s: float = 30.0) -> int:
        assert self.process is not None
        return self.process.wait(timeout=timeout_s)

    def stop(self) -> int | None:
        """SIGTERM (then SIGKILL) if still running; the exit code."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def job(
    model: str,
    version: str,
    inputs: Mapping[str, bytes],
    *,
    reply_to: str,
    job_id: str | None = None,
    streaming: bool = False,
    headers: Mapping[str, str] | None = None,
    deadline_unix_ms: int = 0,
    protocol: "WireProtocol.ValueType" = WireProtocol.TORCHSERVE_GRPC,
    queued_ms: int = 0,
) -> Job:
    """A job as the gateway builds it for a TorchServe gRPC call (``queued_ms`` ago)."""
    request = PredictionsRequest(model_name=model, model_version=version, input=dict(inputs))
    return Job(
        job_id=job_id or uuid.uuid4().hex,
        protocol=protocol,
        model_name=model,
        model_version=version,
        reply_to=reply_to,
        deadline_unix_ms=deadline_unix_ms,
        streaming=streaming,
        headers=dict(headers or {}),
        request=request.SerializeToString() if protocol == WireProtocol.TORCHSERVE_GRPC else b"",
        enqueued_unix_ms=int(time.time() * 1000) - queued_ms,
    )


async def enqueue(client: "aioredis.Redis", *jobs: Job) -> list[bytes]:
    """XADD the jobs to their versions' streams in one transaction (a blocked reader sees them at once)."""
    async with client.pipeline(transaction=True) as pipe:
        for item in jobs:
            pipe.xadd(
                keys.job_stream(item.model_name, item.model_version),
                {envelope.FIELD: envelope.encode_job(item)},
            )
        ids: list[bytes] = await pipe.execute()
    return ids


def prediction(reply: Reply) -> bytes:
    return PredictionResponse.FromString(reply.payload).prediction


class ReplyStream:
    """A gateway's reply stream: created up front (workers XADD with NOMKSTREAM), read in order."""

    def __init__(self, client: "aioredis.Redis", gateway_id: str | None = None) -> None:
        self.client = client
        # XREAD's raw answer: an entry may hold several replies (repeated ``m`` fields), which
        # redis-py's parsed form (a dict per entry) would fold into one.
        self._raw = aioredis.Redis(connection_pool=client.connection_pool)
        self._raw.set_response_callback("XREAD", lambda response, **_options: response)
        self.key = keys.reply_stream(gateway_id or uuid.uuid4().hex[:8])
        self._last_id = b"0-0"
        self.received: list[Reply] = []

    async def open(self) -> "ReplyStream":
        await self.client.xgroup_create(self.key, "probe", id="$", mkstream=True)
        return self

    async def _read(self, block_ms: int) -> list[Reply]:
        response: Any = await self._raw.execute_command(  # type: ignore[no-untyped-call]
            "XREAD", "BLOCK", block_ms, "STREAMS", self.key, self._last_id
        )
        streams = response.items() if isinstance(response, dict) else response or ()  # RESP3 or 2
        got = []
        for _stream, entries in streams:
            for entry_id, fields in entries:
                self._last_id = entry_id
                got += [
                    envelope.decode_reply(value)
                    for name, value in zip(fields[::2], fields[1::2], strict=True)
                    if name == envelope.FIELD
                ]
        self.received += got
        return got

    async def finals(self, job_ids: Iterable[str], timeout_s: float = 30.0) -> dict[str, list[Reply]]:
        """Every reply (in stream order) of ``job_ids``, once each of them has a final reply."""
        wanted = set(job_ids)
        deadline = time.monotonic() + timeout_s
        while True:
            done = {r.job_id for r in self.received if r.final and r.job_id in wanted}
            if done == wanted:
                return {job_id: [r for r in self.received if r.job_id == job_id] for job_id in wanted}
            if time.monotonic() > deadline:
                raise AssertionError(f"no final reply for {sorted(wanted - done)}; got {self.received}")
            await self._read(block_ms=200)

    async def final(self, job_id: str, timeout_s: float = 30.0) -> Reply:
        replies = (await self.finals([job_id], timeout_s))[job_id]
        return replies[-1]

    async def more(self, wait_s: float) -> list[Reply]:
        """Replies that arrive within ``wait_s`` (to check nothing else comes)."""
        got: list[Reply] = []
        deadline = time.monotonic() + wait_s
        while (remaining_ms := int((deadline - time.monotonic()) * 1000)) > 0:
            got += await self._read(block_ms=max(1, remaining_ms))
        return got
