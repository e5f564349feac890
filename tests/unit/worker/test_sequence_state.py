"""Sluice's sequence-state API for handlers (sluice_worker.sequence_state), alone and in the worker
loop driven through the in-memory job source: lost sequences fail clearly, moved states load before
their job runs, states are saved after each batch and bounded in size."""

import asyncio
import sys
import types
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sluice.errors import ErrorCode
from sluice.registry.records import BatchPolicy
from sluice_worker.batch_policy import Batching
from sluice_worker.delivery import Delivery, SequenceTurn
from sluice_worker.sequence_state import (
    SequenceStates,
    StateChange,
    StateHooks,
    StateUpdate,
    find_hooks,
    restore_all,
    save_all,
)
from sluice_worker.torch_thread import TorchThread
from sluice_worker.worker import Worker

from tests.unit.worker.in_memory_source import FakeService, InMemoryJobSource, job, prediction
from tests.unit.worker.test_worker_loop import serve_until


class Totals:
    """A stateful handler's state, with the save/load pair; it records the calls in order."""

    def __init__(self, *, pad: int = 0) -> None:
        self.totals: dict[str, int] = {}
        self.calls: list[str] = []
        self.pad = pad

    def handle(self, data: Any, context: Any) -> Any:
        return data

    def save_sequence_state(self, sequence_id: str) -> bytes | None:
        self.calls.append(f"save {sequence_id}")
        total = self.totals.get(sequence_id)
        return None if total is None else str(total).encode() + b" " * self.pad

    def load_sequence_state(self, sequence_id: str, state: bytes) -> None:
        self.calls.append(f"load {sequence_id}")
        if state == b"corrupt":
            raise ValueError("corrupt state")
        self.totals[sequence_id] = int(state)


def test_hooks_are_found_on_the_handler_object_of_its_entry_point() -> None:
    handler = Totals()
    hooks = find_hooks(handler.handle)
    assert hooks is not None
    hooks.load("s", b"5")
    assert hooks.save("s") == b"5"


def test_hooks_are_found_in_the_module_of_a_function_handler(monkeypatch: pytest.MonkeyPatch) -> None:
    module = types.ModuleType("function_handler")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(
        "def handle(data, context):\n    return data\n"
        "def save_sequence_state(sequence_id):\n    return b'saved'\n"
        "def load_sequence_state(sequence_id, state):\n    pass\n",
        module.__dict__,
    )
    hooks = find_hooks(module.handle)
    assert hooks is not None
    assert hooks.save("s") == b"saved"


def test_a_handler_with_only_one_of_the_pair_does_not_opt_in() -> None:
    class SaveOnly:
        def handle(self, data: Any, context: Any) -> Any:
            return data

        def save_sequence_state(self, sequence_id: str) -> bytes:
            return b""

    assert find_hooks(SaveOnly().handle) is None


def test_saved_states_are_bytes_or_the_reason_there_is_none() -> None:
    states: dict[str, Any] = {"big": b"x" * 11, "none": None, "text": "nope", "ok": bytearray(b"fine")}

    def save(sequence_id: str) -> Any:
        if sequence_id not in states:
            raise ZeroDivisionError("no state")
        return states[sequence_id]

    hooks = StateHooks(save=save, load=lambda sequence_id, state: None)
    saved = save_all(hooks, ["big", "none", "text", "ok", "boom"], max_bytes=10)
    assert saved["ok"] == b"fine"
    assert saved["none"] == ""
    assert saved["big"] == "sequence state of 11 bytes exceeds sequenceStateMaxBytes (10); it was not saved"
    assert saved["text"] == "save_sequence_state returned str, not bytes"
    assert isinstance(saved["boom"], str)
    assert "ZeroDivisionError" in saved["boom"]


def test_states_that_do_not_load_are_reported() -> None:
    handler = Totals()
    hooks = find_hooks(handler.handle)
    assert hooks is not None
    failed = restore_all(hooks, [("a", b"3"), ("b", b"corrupt")])
    assert list(failed) == ["b"]
    assert "corrupt state" in failed["b"]
    assert handler.totals == {"a": 3}


@pytest.fixture
async def torch_thread() -> AsyncIterator[TorchThread]:
    thread = TorchThread()
    yield thread
    thread.close()


def row(sid: str, value: int, *, restore: bytes | None = None, lost: bool = False) -> Delivery:
    """A job of sequence ``sid`` whose row says "<sid>:<value>"."""
    made = job(f"{sid}:{value}".encode())
    made.sequence_id = sid
    return Delivery(made.job_id.encode(), made, sequence=SequenceTurn(sid, restore=restore, lost=lost))


def accumulate(handler: Totals) -> FakeService:
    """A service whose rows are "<sequence>:<value>": each adds value to its sequence's total."""

    def behaviour(rows: list[bytes], context: Any) -> list[Any]:
        out = []
        for data in rows:
            sid, value = data.decode().split(":")
            handler.calls.append(f"run {sid}")
            handler.totals[sid] = handler.totals.get(sid, 0) + int(value)
            out.append(str(handler.totals[sid]).encode())
        return out

    return FakeService(behaviour)


async def serve(
    source: InMemoryJobSource, torch_thread: TorchThread, handler: Totals, max_bytes: int = 1024
) -> None:
    hooks = find_hooks(handler.handle)
    stopping = asyncio.Event()
    loop_worker = Worker(
        batching=Batching(policy=BatchPolicy.EAGER, batch_size=4, max_batch_delay_ms=10, max_block_ms=20),
        response_timeout_s=5,
        claim_scan_interval_s=60,
        source=source,
        torch_thread=torch_thread,
        service=accumulate(handler),
        stopping=stopping,
        sequences=SequenceStates(hooks, max_bytes, torch_thread),
    )
    expected = len(source.waiting)
    await serve_until(loop_worker, stopping, lambda: len(source.acked) == expected)


async def test_a_moved_sequence_loads_its_state_before_its_job_runs_and_saves_after(
    torch_thread: TorchThread,
) -> None:
    handler = Totals()
    source = InMemoryJobSource()
    moved = row("a", 4, restore=b"6")
    source.waiting.extend([moved, row("b", 1)])
    await serve(source, torch_thread, handler)
    assert handler.calls[:3] == ["load a", "run a", "run b"]
    assert prediction(source.reply_of(moved.job_id)) == b"10"
    [finished] = source.finished
    assert finished.states == {
        "a": StateUpdate(StateChange.SAVE, b"10"),
        "b": StateUpdate(StateChange.SAVE, b"1"),
    }


async def test_a_lost_sequence_fails_with_a_clear_error_and_does_not_run(torch_thread: TorchThread) -> None:
    handler = Totals()
    source = InMemoryJobSource()
    lost = row("a", 4, lost=True)
    source.waiting.extend([lost, row("b", 1)])
    await serve(source, torch_thread, handler)
    reply = source.reply_of(lost.job_id)
    assert (reply.error_code, reply.status_code, reply.message) == (
        ErrorCode.ABORTED.value,
        409,
        "sequence state lost: worker died",
    )
    assert "run a" not in handler.calls
    assert "run b" in handler.calls


async def test_a_state_that_does_not_load_loses_the_sequence(torch_thread: TorchThread) -> None:
    handler = Totals()
    source = InMemoryJobSource()
    broken = row("a", 4, restore=b"corrupt")
    source.waiting.append(broken)
    await serve(source, torch_thread, handler)
    assert source.reply_of(broken.job_id).error_code == ErrorCode.ABORTED.value
    assert source.finished[0].states == {"a": StateUpdate(StateChange.LOSE)}
    assert "run a" not in handler.calls


async def test_an_oversized_state_fails_its_job_and_is_forgotten(torch_thread: TorchThread) -> None:
    handler = Totals(pad=100)
    source = InMemoryJobSource()
    big = row("a", 4)
    source.waiting.append(big)
    await serve(source, torch_thread, handler, max_bytes=10)
    reply = source.reply_of(big.job_id)
    assert reply.error_code == ErrorCode.HANDLER_FAILED.value
    assert "exceeds sequenceStateMaxBytes (10)" in reply.message
    assert source.finished[0].states == {"a": StateUpdate(StateChange.FORGET)}
