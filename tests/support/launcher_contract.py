"""The launcher contract (sluice_manager.supervision.launchers.base.Launcher): what every launcher must
do, written once and run against each one — the in-memory fake (unit tier), local processes
(integration tier) and containers on a real Docker engine (docker tier).

A test module binds :data:`CONTRACT` to its launcher through a ``launcher_under_test`` fixture that
yields a :class:`LauncherUnderTest`. Workers run :data:`FAKE_WORKER_PROGRAM` (``python -c``): it
exits 0 on SIGTERM, as a real worker does once drained, and exits at once with the code its version
names (``exit-3``) to stand for a failed load.
"""

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from sluice_manager.supervision.launchers.base import (
    Launcher,
    LaunchRecord,
    Placement,
    RunState,
    WorkerExit,
    WorkerSpec,
)

from tests.support.eventually import eventually

FAKE_WORKER_PROGRAM = """
import signal, sys, time
args = sys.argv[1:]
version = args[args.index("--model-version") + 1]
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
print("fake worker up", args, flush=True)
if version.startswith("exit-"):
    sys.exit(int(version[5:]))
for _ in range(600):
    time.sleep(0.1)
"""
# A worker that stays up until stopped, and one that exits by itself with code 3.
RUNS = "1.0"
EXITS_3 = "exit-3"
EXIT_TIMEOUT_S = 30.0


@dataclass
class LauncherUnderTest:
    # A new launcher as a (re)started manager would build it.
    make: Callable[[], Awaitable[Launcher]]
    host: str
    # Codes an exit may be reported with after a graceful stop (0 once the program handles SIGTERM,
    # the signal's own code before) / a kill (None: unknown, e.g. a process that is not the
    # launcher's child).
    stopped_codes: frozenset[int | None] = frozenset({0})
    killed_codes: frozenset[int | None] = frozenset({-9})
    # False for a launcher that cannot measure its workers (swarm: containers on other nodes); its
    # usage() must then be empty, and Describe shows what workers report of themselves.
    measures_usage: bool = True
    launchers: list[Launcher] = field(default_factory=list)

    async def new(self) -> Launcher:
        launcher = await self.make()
        await launcher.prepare()
        self.launchers.append(launcher)
        return launcher

    async def close_all(self) -> None:
        for launcher in self.launchers:
            for worker_id, state in (await launcher.states()).items():
                if state is RunState.RUNNING:
                    await launcher.stop(worker_id, graceful=False)
            await launcher.aclose()


def spec(launcher_host: str, worker_id: str, version: str = RUNS, *, threads: int = 2) -> WorkerSpec:
    return WorkerSpec("m", version, worker_id, Placement(host=launcher_host, torch_threads=threads))


class ExitWatch:
    """Collects a launcher's exit events (its ``exits()`` drained in a task)."""

    def __init__(self, launcher: Launcher) -> None:
        self.seen: dict[str, WorkerExit] = {}
        self._task = asyncio.ensure_future(self._drain(launcher.exits()))

    async def _drain(self, exits: AsyncIterator[WorkerExit]) -> None:
        async for ended in exits:
            assert ended.worker_id not in self.seen, f"exit of {ended.worker_id} reported twice"
            self.seen[ended.worker_id] = ended

    async def wait_for(self, worker_id: str) -> WorkerExit:
        await eventually(lambda: worker_id in self.seen, timeout_s=EXIT_TIMEOUT_S)
        return self.seen[worker_id]

    def close(self) -> None:
        self._task.cancel()


async def _states(launcher: Launcher) -> dict[str, RunState]:
    return await launcher.states()


async def started_worker_runs_and_keeps_its_record(under: LauncherUnderTest) -> None:
    launcher = await under.new()
    record = await launcher.start(spec(under.host, "9000", threads=2))
    assert (record.worker_id, record.model_name, record.version) == ("9000", "m", RUNS)
    assert record.launcher == launcher.name
    assert record.handle
    assert record.placement.torch_threads == 2
    assert LaunchRecord.from_json(record.to_json()) == record
    assert (await _states(launcher)) == {"9000": RunState.RUNNING}


async def graceful_stop_is_reported_once(under: LauncherUnderTest) -> None:
    launcher = await under.new()
    watch = ExitWatch(launcher)
    try:
        await launcher.start(spec(under.host, "9001"))
        await launcher.stop("9001", graceful=True)
        ended = await watch.wait_for("9001")
        assert ended.exit_code in under.stopped_codes
        await eventually(lambda: _is(launcher, "9001", RunState.EXITED), timeout_s=EXIT_TIMEOUT_S)
        await launcher.release("9001")
        assert "9001" not in await _states(launcher)
        await asyncio.sleep(0.3)
        assert list(watch.seen) == ["9001"]
    finally:
        watch.close()


async def kill_is_reported(under: LauncherUnderTest) -> None:
    launcher = await under.new()
    watch = ExitWatch(launcher)
    try:
        await launcher.start(spec(under.host, "9002"))
        await launcher.stop("9002", graceful=False)
        assert (await watch.wait_for("9002")).exit_code in under.killed_codes
    finally:
        watch.close()


async def a_worker_that_exits_by_itself_is_reported_with_its_code(under: LauncherUnderTest) -> None:
    launcher = await under.new()
    watch = ExitWatch(launcher)
    try:
        await launcher.start(spec(under.host, "9003", EXITS_3))
        assert (await watch.wait_for("9003")).exit_code == 3
    finally:
        watch.close()


async def a_new_launcher_adopts_running_workers_once(under: LauncherUnderTest) -> None:
    first = await under.new()
    record = await first.start(spec(under.host, "9004"))
    await first.aclose()  # the manager went away; the worker runs on
    under.launchers.remove(first)
    second = await under.new()
    watch = ExitWatch(second)
    try:
        assert not await second.adopt([record.model_copy(update={"worker_id": "9999"})])
        [adopted] = await second.adopt([record])
        assert (adopted.worker_id, adopted.handle) == ("9004", record.handle)
        assert not await second.adopt([record]), "adopted once"
        assert await _states(second) == {"9004": RunState.RUNNING}
        await second.stop("9004", graceful=True)
        assert (await watch.wait_for("9004")).exit_code in under.stopped_codes | {None}
    finally:
        watch.close()


async def a_dead_worker_is_not_adopted(under: LauncherUnderTest) -> None:
    first = await under.new()
    watch = ExitWatch(first)
    try:
        record = await first.start(spec(under.host, "9005"))
        await first.stop("9005", graceful=False)
        await watch.wait_for("9005")
    finally:
        watch.close()
    second = await under.new()
    assert await second.adopt([record]) == []


async def discovery_lists_only_running_workers(under: LauncherUnderTest) -> None:
    launcher = await under.new()
    await launcher.start(spec(under.host, "9006"))
    found = await launcher.discover()
    # Launchers that cannot see workers by themselves find none; those that can find this one.
    assert {record.worker_id for record in found} <= {"9006"}
    for record in found:
        assert (record.model_name, record.version, record.launcher) == ("m", RUNS, launcher.name)


async def capacity_and_usage_are_reported(under: LauncherUnderTest) -> None:
    launcher = await under.new()
    capacity = await launcher.capacity()
    assert capacity.cpus >= 1
    assert capacity.host == under.host
    record = await launcher.start(spec(under.host, "9007"))
    if not under.measures_usage:
        assert await launcher.usage([record]) == {}
        return

    async def measured() -> bool:
        usage = await launcher.usage([record])
        return "9007" in usage and usage["9007"].memory_bytes > 0

    await eventually(measured, timeout_s=EXIT_TIMEOUT_S)


async def stopping_an_unknown_worker_is_harmless(under: LauncherUnderTest) -> None:
    launcher = await under.new()
    await launcher.stop("nope", graceful=True)
    await launcher.stop("nope", graceful=False)
    await launcher.release("nope")


async def _is(launcher: Launcher, worker_id: str, state: RunState) -> bool:
    return (await launcher.states()).get(worker_id) is state


CONTRACT: list[Callable[[LauncherUnderTest], Awaitable[None]]] = [
    started_worker_runs_and_keeps_its_record,
    graceful_stop_is_reported_once,
    kill_is_reported,
    a_worker_that_exits_by_itself_is_reported_with_its_code,
    a_new_launcher_adopts_running_workers_once,
    a_dead_worker_is_not_adopted,
    discovery_lists_only_running_workers,
    capacity_and_usage_are_reported,
    stopping_an_unknown_worker_is_harmless,
]
CONTRACT_IDS = [check.__name__ for check in CONTRACT]
