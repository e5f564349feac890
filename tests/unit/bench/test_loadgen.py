"""The closed-loop load generator's bookkeeping, with a call that only sleeps."""

import asyncio

from bench.loadgen import closed_loop


async def test_throughput_counts_every_answer_inside_the_window() -> None:
    concurrency = 4

    async def call() -> bytes:
        await asyncio.sleep(0.1)
        return b"ok"

    result = await closed_loop(call, concurrency=concurrency, duration_s=0.6, warmup_s=0.15)
    # Each client has one call in flight when the window opens: its answer lands inside the window
    # and counts for throughput, but it is no latency sample (it started during the warm-up).
    assert result.requests + 1 <= result.completed_in_window <= result.requests + concurrency
    assert result.throughput_rps == result.completed_in_window / 0.6
    # The warm-up's answers count for the CPU-per-request divisor only.
    assert result.completed > result.completed_in_window
    assert not result.errors
