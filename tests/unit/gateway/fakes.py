"""In-memory stand-ins for the gateway's I/O seams (unit tests open no sockets)."""

import asyncio
from collections.abc import Sequence
from typing import Any

from sluice.kserve.shared_memory import Region
from sluice.registry.reader import ModelRouting
from sluice.registry.records import StartupReport, VersionRecord, WorkerRecord, WorkerStatus
from sluice.registry.workflows import WorkflowRecord
from sluice_gateway.broker.seam import BrokerUnavailable
from sluice_gateway.metrics.cluster import VersionStats


class FakeClusterReader:
    """The registry kept in dicts behind the gateway's ``ClusterReader`` seam, counting the reads."""

    def __init__(self) -> None:
        # model -> (default, versions); (model, version) -> record / live workers.
        self.models: dict[str, tuple[str | None, set[str]]] = {}
        self.records: dict[tuple[str, str], VersionRecord] = {}
        self.workers: dict[tuple[str, str], list[WorkerRecord]] = {}
        self.report: StartupReport | None = None
        # model -> traffic weights; (model, version, sequence id) of the live sequences.
        self.weights: dict[str, dict[str, int]] = {}
        self.sequences: set[tuple[str, str, str]] = set()
        self.stats: list[VersionStats] = []
        self.workflows: dict[str, WorkflowRecord] = {}
        self.reads = 0
        # Raise BrokerUnavailable while set; a set gate holds every read until it opens.
        self.down = False
        self.gate: asyncio.Event | None = None

    def put(self, record: VersionRecord, *, default: bool = True) -> None:
        old_default, versions = self.models.get(record.model_name, (None, set()))
        new_default = record.version if default or old_default is None else old_default
        self.models[record.model_name] = (new_default, versions | {record.version})
        self.records[(record.model_name, record.version)] = record

    async def _read(self) -> None:
        self.reads += 1
        if self.gate is not None:
            await self.gate.wait()
        if self.down:
            raise BrokerUnavailable("down")

    async def model_names(self) -> list[str]:
        await self._read()
        return sorted(self.models)

    async def model_versions(self, model: str) -> tuple[str | None, set[str]]:
        await self._read()
        default, versions = self.models.get(model, (None, set()))
        return default, set(versions)

    async def model_routing(self, model: str) -> ModelRouting:
        await self._read()
        default, versions = self.models.get(model, (None, set()))
        return ModelRouting(default, frozenset(versions), dict(self.weights.get(model, {})))

    async def sequence_version(self, model: str, versions: Sequence[str], sequence_id: str) -> str | None:
        await self._read()
        return next((v for v in versions if (model, v, sequence_id) in self.sequences), None)

    async def version_record(self, model: str, version: str) -> VersionRecord | None:
        await self._read()
        return self.records.get((model, version))

    async def live_workers(self, model: str, version: str) -> list[WorkerRecord]:
        await self._read()
        return list(self.workers.get((model, version), []))

    async def workflow(self, name: str) -> WorkflowRecord | None:
        await self._read()
        return self.workflows.get(name)

    async def startup_report(self) -> StartupReport | None:
        await self._read()
        return self.report

    async def version_stats(self) -> list[VersionStats]:
        await self._read()
        return list(self.stats)

    async def answers(self, timeout_s: float) -> bool:
        return not self.down


def record(model: str = "echo", version: str = "1.0", **fields: Any) -> VersionRecord:
    return VersionRecord(
        model_name=model, version=version, model_url="m.mar", model_dir="/none", handler="h", **fields
    )


def worker(worker_id: str = "9000") -> WorkerRecord:
    return WorkerRecord(worker_id=worker_id, pid=1, host="h", status=WorkerStatus.READY, started_unix_ms=0)


class InMemoryRegions:
    """Registered shared-memory regions in a dict behind the ``RegionStore`` seam."""

    def __init__(self) -> None:
        self.regions: dict[str, Region] = {}
        self.down = False

    def _check(self) -> None:
        if self.down:
            raise BrokerUnavailable("down")

    async def add(self, region: Region) -> bool:
        self._check()
        if region.name in self.regions:
            return False
        self.regions[region.name] = region
        return True

    async def remove(self, names: Sequence[str]) -> None:
        self._check()
        for name in names or list(self.regions):
            self.regions.pop(name, None)

    async def find(self, names: Sequence[str]) -> dict[str, Region]:
        self._check()
        return {name: region for name, region in self.regions.items() if not names or name in names}
