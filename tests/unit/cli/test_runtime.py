"""The runtime folder's pid file and process identity checks."""

import os
from pathlib import Path

import psutil
from sluice_cli.children import log_tail
from sluice_cli.runtime import MAX_SOCKET_PATH, PidFile, ProcessRef, RuntimeDir, remove_pid_file


def me(**changes: object) -> ProcessRef:
    process = psutil.Process()
    ref = ProcessRef(name="self", pid=os.getpid(), start_time=process.create_time(), marker="python")
    return ref.model_copy(update=changes)


def test_runtime_layout(tmp_path: Path) -> None:
    runtime = RuntimeDir.at(tmp_path / "var")
    runtime.prepare()
    assert runtime.pid_file == tmp_path / "var" / "sluice.pid"
    assert runtime.logs.is_dir()
    assert runtime.redis_data.is_dir()
    assert runtime.log_file("manager") == tmp_path / "var" / "logs" / "manager.log"
    assert runtime.redis_socket == tmp_path / "var" / "redis" / "redis.sock"
    assert runtime.redis_config == tmp_path / "var" / "redis.conf"


def test_no_redis_socket_when_its_path_is_too_long(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * (MAX_SOCKET_PATH - len(str(tmp_path))))
    assert RuntimeDir.at(deep).redis_socket is None


def test_pid_file_round_trip(tmp_path: Path) -> None:
    runtime = RuntimeDir.at(tmp_path)
    state = PidFile.new(
        runtime, "redis://127.0.0.1:6399/0", private_redis=True, gateway_target="127.0.0.1:7070"
    )
    state.processes.append(me())
    runtime.pid_file.with_name("sluice.pid.tmp").write_text("left by a crash")
    state.write(runtime.pid_file)
    assert runtime.pid_file.stat().st_mode & 0o777 == 0o600  # its redis_url may carry a password
    assert not runtime.pid_file.with_name("sluice.pid.tmp").exists()
    loaded = PidFile.read(runtime.pid_file)
    assert loaded == state
    assert loaded is not None
    assert loaded.live() == [me()]
    assert loaded.get("self") == me()
    assert loaded.get("nope") is None
    remove_pid_file(runtime.pid_file)
    remove_pid_file(runtime.pid_file)
    assert PidFile.read(runtime.pid_file) is None


def test_unreadable_pid_file_counts_as_stale(tmp_path: Path) -> None:
    path = tmp_path / "sluice.pid"
    path.write_text("{garbage")
    assert PidFile.read(path) is None


def test_a_reused_pid_is_not_our_process() -> None:
    assert me().alive()
    assert not me(start_time=me().start_time - 3600).alive()
    assert not me(marker="redis-server").alive()
    assert not me(pid=2**22 + 12345).alive()


def test_log_tail(tmp_path: Path) -> None:
    path = tmp_path / "x.log"
    path.write_text("".join(f"line {i}\n" for i in range(100)))
    assert log_tail(path, 3) == ["line 97", "line 98", "line 99"]
    assert log_tail(tmp_path / "missing.log") == []
