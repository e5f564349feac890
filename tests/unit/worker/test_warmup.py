"""Warm-up before READY through the worker's own loop (a real ``Worker`` on the torch thread, a
stand-in handler service): every request of the file reaches the handler, one at a time, as a
TorchServe REST body; a failing request, a bad file or a loop that dies fails the warm-up."""

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sluice.registry.records import BatchPolicy, VersionRecord
from sluice_worker.batch_policy import Batching
from sluice_worker.protocols import TsRequest
from sluice_worker.torch_thread import TorchThread
from sluice_worker.warmup import WarmupFailed, WarmupSource, warm_up
from sluice_worker.worker import Worker
from ts.protocol.otf_message_handler import create_predict_response


def record(warmup_requests: str = "warmup.json") -> VersionRecord:
    return VersionRecord(
        model_name="m", version="1.0", model_url="m.mar", model_dir="/m", handler="h.py",
        warmup_requests=warmup_requests,
    )  # fmt: skip


RECORD = record()


class BodyService:
    """Answers each row's REST ``body`` (as TorchServe decodes it) back as JSON; fails a body
    ``boom``; records the calls."""

    def __init__(self) -> None:
        self.calls: list[list[tuple[Any, str]]] = []

    def set_cl_socket(self, cl_socket: Any) -> None:
        pass

    def predict(self, batch: list[TsRequest]) -> bytes:
        rows = []
        for request in batch:
            [body] = [p for p in request["parameters"] if p["name"] == "body"]
            rows.append((body["value"], str(body["contentType"])))
        self.calls.append(rows)
        ids = {index: request["requestId"].decode() for index, request in enumerate(batch)}
        if any(value == "boom" for value, _ in rows):
            return bytes(create_predict_response(None, ids, "Prediction failed", 503))
        answers = [json.dumps(value) for value, _ in rows]
        return bytes(create_predict_response(answers, ids, "Prediction success", 200))


@pytest.fixture
async def torch_thread() -> AsyncIterator[TorchThread]:
    thread = TorchThread()
    yield thread
    thread.close()


def build(torch_thread: TorchThread, service: BodyService, batch_size: int = 4) -> Any:
    def loop(source: WarmupSource, stopping: asyncio.Event) -> Worker:
        return Worker(
            batching=Batching(
                policy=BatchPolicy.FILL, batch_size=batch_size, max_batch_delay_ms=50, max_block_ms=50
            ),
            response_timeout_s=5.0,
            claim_scan_interval_s=60,
            source=source,
            torch_thread=torch_thread,
            service=service,
            stopping=stopping,
        )

    return loop


def write(folder: Path, items: object) -> Path:
    (folder / "warmup.json").write_text(json.dumps(items))
    return folder


async def test_every_request_reaches_the_handler_one_at_a_time(
    torch_thread: TorchThread, tmp_path: Path
) -> None:
    service = BodyService()
    folder = write(tmp_path, ["hello", {"prompt": "hi"}, [1, 2]])
    assert await warm_up(RECORD, folder, build(torch_thread, service), timeout_s=10) == 3
    assert service.calls == [
        [("hello", "text/plain")],
        [({"prompt": "hi"}, "application/json")],
        [([1, 2], "application/json")],
    ]


async def test_a_failing_request_fails_the_warm_up(torch_thread: TorchThread, tmp_path: Path) -> None:
    service = BodyService()
    folder = write(tmp_path, ["fine", "boom"])
    with pytest.raises(WarmupFailed, match=r"warm-up request 2 of warmup.json failed: 503 Prediction failed"):
        await warm_up(RECORD, folder, build(torch_thread, service), timeout_s=10)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "is not a file in the archive"),
        ("{not json", "is not JSON"),
        ('{"a": 1}', "must hold a non-empty JSON list"),
        ("[]", "must hold a non-empty JSON list"),
    ],
)
async def test_a_bad_file_fails_the_warm_up(
    torch_thread: TorchThread, tmp_path: Path, content: str | None, problem: str
) -> None:
    if content is not None:
        (tmp_path / "warmup.json").write_text(content)
    with pytest.raises(WarmupFailed, match=problem):
        await warm_up(RECORD, tmp_path, build(torch_thread, BodyService()), timeout_s=10)


async def test_a_file_outside_the_model_folder_is_refused(torch_thread: TorchThread, tmp_path: Path) -> None:
    (tmp_path / "secret.json").write_text('["x"]')
    (tmp_path / "model").mkdir()
    with pytest.raises(WarmupFailed, match="outside the model's folder"):
        await warm_up(
            record("../secret.json"), tmp_path / "model", build(torch_thread, BodyService()), timeout_s=10
        )


async def test_a_warm_up_that_does_not_finish_in_time_fails(
    torch_thread: TorchThread, tmp_path: Path
) -> None:
    class SlowService(BodyService):
        def predict(self, batch: list[TsRequest]) -> bytes:
            time.sleep(0.5)
            return super().predict(batch)

    folder = write(tmp_path, ["a", "b", "c"])
    with pytest.raises(WarmupFailed, match=r"did not finish within 0\.2 s"):
        await warm_up(RECORD, folder, build(torch_thread, SlowService()), timeout_s=0.2)
