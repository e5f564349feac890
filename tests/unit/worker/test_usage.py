"""What a worker reports of its use with each heartbeat, CUDA paths included (chosen by configuration:
no GPU is needed)."""

from sluice.host_readings import HostReadings, read_host
from sluice.registry.records import WorkerRecord, WorkerStatus
from sluice_worker.device import choose_device
from sluice_worker.usage import MIB, BusyShare, usage_refresher

RECORD = WorkerRecord(worker_id="9000", pid=1, host="h", status=WorkerStatus.READY, started_unix_ms=0)


def never_busy() -> float:
    return 0.0


class FakeGpu:
    def __init__(self) -> None:
        self.asked: list[int] = []

    def utilization(self, device: int) -> int:
        self.asked.append(device)
        return 37

    def memory_utilization(self, device: int) -> int:
        return 12

    def memory_reserved(self, device: int) -> int:
        return 1536 * MIB


def test_a_cpu_worker_reports_its_memory_only() -> None:
    gpu = FakeGpu()
    refreshed = usage_refresher(choose_device(None, 0), never_busy, gpu, rss=lambda: 123)(RECORD)
    assert refreshed.memory_bytes == 123
    assert (refreshed.gpu_id, refreshed.gpu_utilization_percent, refreshed.gpu_memory_used_mib) == (
        None,
        0.0,
        0.0,
    )
    assert gpu.asked == []


def test_a_cuda_worker_reports_its_gpu() -> None:
    gpu = FakeGpu()
    refreshed = usage_refresher(choose_device(1, cuda_device_count=2), never_busy, gpu, rss=lambda: 5)(RECORD)
    assert (refreshed.memory_bytes, refreshed.gpu_id) == (5, 1)
    assert (refreshed.gpu_utilization_percent, refreshed.gpu_memory_used_mib) == (37.0, 1536.0)
    assert refreshed.gpu_memory_utilization_percent == 12.0
    assert gpu.asked == [1]


def test_a_gpu_request_on_a_machine_without_cuda_reports_no_gpu() -> None:
    refreshed = usage_refresher(choose_device(0, cuda_device_count=0), never_busy, FakeGpu(), rss=lambda: 5)(
        RECORD
    )
    assert refreshed.gpu_id is None


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_busy_share_is_the_handler_time_between_two_beats() -> None:
    clock, busy = Clock(), [0.0]
    share = BusyShare(lambda: busy[0], clock)
    clock.now, busy[0] = 102.0, 1.5
    assert share.read() == 0.75
    clock.now = 103.0
    assert share.read() == 0.0, "no work since the last reading"
    clock.now, busy[0] = 104.0, 3.0
    assert share.read() == 1.0, "a call longer than the interval counts once, capped at all of it"
    assert share.read() == 0.0, "no time passed"


def test_the_busy_share_goes_into_the_record() -> None:
    ran = iter([0.0, 0.25])
    refreshed = usage_refresher(choose_device(None, 0), lambda: next(ran), FakeGpu(), rss=lambda: 1)(RECORD)
    assert 0.0 < refreshed.busy_share <= 1.0


def test_each_beat_carries_the_hosts_system_readings() -> None:
    readings = iter([HostReadings(memory_used_mib=1.0), HostReadings(memory_used_mib=2.0)])
    refresh = usage_refresher(
        choose_device(None, 0), never_busy, FakeGpu(), rss=lambda: 1, host=lambda: next(readings)
    )
    assert refresh(RECORD).host_readings.memory_used_mib == 1.0
    assert refresh(RECORD).host_readings.memory_used_mib == 2.0


def test_the_hosts_readings_are_real_and_survive_the_record_round_trip() -> None:
    read = read_host()
    assert read.memory_used_mib > 0
    assert 0 < read.disk_percent <= 100
    record = WorkerRecord.from_json(
        usage_refresher(choose_device(None, 0), never_busy, FakeGpu())(RECORD).to_json()
    )
    assert record.host_readings.memory_available_mib > 0
