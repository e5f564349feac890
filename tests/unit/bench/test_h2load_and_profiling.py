from pathlib import Path

import pytest

from bench import h2load, profiling

H2LOAD_OUTPUT = """
finished in 5.00s, 2345.20 req/s, 123.45KB/s
requests: 11726 total, 11726 started, 11726 done, 11720 succeeded, 6 failed, 0 errored, 0 timeout
status codes: 11720 2xx, 0 3xx, 0 4xx, 6 5xx
traffic: 1.2MB (1234567) total, 100KB (102400) headers (space savings 90.00%), 1.0MB (1048576) data
                     min         max         mean         sd        +/- sd
time for request:      312us     12.34ms      1.23ms       456us    78.90%
time for connect:      100us       100us       100us         0us   100.00%
"""


def test_parse_h2load_summary() -> None:
    result = h2load.parse(H2LOAD_OUTPUT)
    assert result.throughput_rps == pytest.approx(2345.20)
    assert (result.done, result.succeeded, result.failed, result.errored) == (11726, 11720, 6, 0)
    assert result.status_2xx == 11720
    assert result.latency_min_ms == pytest.approx(0.312)
    assert result.latency_max_ms == pytest.approx(12.34)
    assert result.latency_mean_ms == pytest.approx(1.23)
    assert result.latency_sd_ms == pytest.approx(0.456)
    assert result.duration_s == pytest.approx(5.0)


def test_parse_h2load_without_summary_fails() -> None:
    with pytest.raises(ValueError, match="no summary"):
        h2load.parse("connection refused")


def test_h2load_command_posts_a_grpc_body() -> None:
    argv = h2load.command(
        "http://127.0.0.1:1/s/M", Path("/b"), clients=1, streams_per_client=16, duration_s=2.5, warmup_s=0.5
    )
    assert argv[0] == "h2load"
    assert "content-type: application/grpc" in argv
    assert argv[argv.index("--duration") + 1] == "2500ms"
    assert argv[argv.index("--max-concurrent-streams") + 1] == "16"
    assert argv[argv.index("--data") + 1] == "/b"
    assert h2load.split_concurrency(64) == (1, 64)
    assert h2load.split_concurrency(64, max_clients=4) == (4, 16)


def test_profile_reduces_collapsed_stacks() -> None:
    lines = [
        "main (a.py:1);loop (a.py:5);send (grpc.py:10) 30",
        "main (a.py:1);loop (a.py:5);parse (redis.py:3) 10",
        "main (a.py:1);idle (a.py:9) 10",
        "garbage line",
    ]
    stacks = profiling.parse_collapsed(lines)
    assert len(stacks) == 3
    top = profiling.top_self(stacks)
    assert top[0].frame == "send (grpc.py)"
    assert top[0].share == pytest.approx(0.6)
    by_file = {share.frame: share.share for share in profiling.self_by_file(stacks)}
    assert by_file == {"grpc.py": 0.6, "redis.py": 0.2, "a.py": 0.2}
    inclusive = {share.frame: share.share for share in profiling.top_inclusive(stacks)}
    assert inclusive["main (a.py)"] == pytest.approx(1.0)
    assert inclusive["loop (a.py)"] == pytest.approx(0.8)


def test_frames_tied_on_the_stack_are_listed_outermost_first() -> None:
    # A set would order these by string hash, which changes from one interpreter to the next.
    frames = [f"frame{index} (m.py:{index})" for index in range(12)]
    stacks = profiling.parse_collapsed([";".join(frames) + " 5"])
    assert [share.frame for share in profiling.top_inclusive(stacks)] == [
        f"frame{index} (m.py)" for index in range(12)
    ]


def test_profile_summary_leaves_waits_out(tmp_path: Path) -> None:
    raw = tmp_path / "p.txt"
    raw.write_text(
        "thread (1);main (a.py:1);epoll_wait (libc.so.6) 70\n"
        "thread (1);main (a.py:1);0x7f00 (libc.so.6) 10\n"
        "thread (1);main (a.py:1);write (libc.so.6) 15\n"
        "thread (1);main (a.py:1);work (a.py:3) 5\n"
    )
    summary = profiling.summarize(raw)
    assert summary["samples"] == 100
    assert summary["busy_samples"] == 20
    assert summary["self"] == [["write (libc.so.6)", 0.75], ["work (a.py)", 0.25]]
    assert (
        profiling.file_name("mlp_b1_w1", 64, "worker:mlp_b1_w1:9000")
        == "mlp_b1_w1-c64-worker_mlp_b1_w1_9000.txt"
    )
