"""The in-process limit of ``make bench-generate``: ``python -m bench.generate_limit '<json>'`` runs
``examples.tiny_gpt.reference.drive`` (the continuous-batching handler with TorchServe's schedule and
no server) in a process of its own with the servers' torch threads, and prints one JSON object.

The argument names ``prompts``, ``max_new_tokens``, ``requests``, ``concurrency``, ``batch_size`` and
``threads``. The requests take the prompts in turn, as the load generator's clients do, and run with
``min(concurrency, batch_size)`` slots: all queued at the start, which is what a closed loop of
``concurrency`` clients does to a server whose batch holds ``batch_size`` (its queue never empties
when there are more clients than slots; each freed slot is taken at once when there are fewer).
From the same schedule the time to first token is counted from when a closed-loop client would have
sent the request: the first ``concurrency`` at the start, each later one when the run's next request
ended (:func:`closed_loop_sent`).

Output tokens/s counts the tokens that came back before the last request was admitted, over that
time (after it the batch drains and runs below its size, which a closed loop never does).
"""

import json
import sys
import time
from collections.abc import Sequence
from itertools import pairwise
from typing import Any

from bench.stats import latency_summary_ms


def closed_loop_sent(last_token_s: Sequence[float], concurrency: int) -> list[float]:
    """When each request would have been sent by ``concurrency`` closed-loop clients: the first
    ``concurrency`` at 0, request ``i`` after that when the ``(i - concurrency)``-th request (in
    order of their ends) ended."""
    ends = sorted(last_token_s)
    count = len(last_token_s)
    return [0.0 if index < concurrency else ends[index - concurrency] for index in range(count)]


def figures(
    token_times: Sequence[Sequence[float]], admitted: Sequence[float], concurrency: int
) -> dict[str, Any]:
    """Tokens/s, TTFT and inter-token latencies of a driver run (times in seconds from its start)."""
    steady_s = max(admitted) if admitted and max(admitted) > 0 else max(t[-1] for t in token_times)
    in_window = sum(1 for times in token_times for at in times if at <= steady_s)
    sent = closed_loop_sent([times[-1] for times in token_times], concurrency)
    ttft_ns = [int((times[0] - at) * 1e9) for times, at in zip(token_times, sent, strict=True)]
    itl_ns = [int((b - a) * 1e9) for times in token_times for a, b in pairwise(times)]
    return {
        "steady_s": steady_s,
        "tokens_in_window": in_window,
        "tokens_per_s": in_window / steady_s if steady_s > 0 else 0.0,
        "ttft_ms": latency_summary_ms(ttft_ns),
        "itl_ms": latency_summary_ms(itl_ns),
        "ttft_samples": len(ttft_ns),
        "itl_samples": len(itl_ns),
    }


def run(spec: dict[str, Any]) -> dict[str, Any]:
    import torch

    torch.set_num_threads(int(spec["threads"]))
    from examples.tiny_gpt import reference

    prompts: list[str] = list(spec["prompts"])
    budget = int(spec["max_new_tokens"])
    concurrency, batch_size = int(spec["concurrency"]), int(spec["batch_size"])
    slots = max(1, min(concurrency, batch_size))
    count = max(int(spec["requests"]), slots)
    requests = [(prompts[index % len(prompts)], budget) for index in range(count)]
    expected = ["".join(reference.generate(prompt, budget)) for prompt in prompts]
    reference.drive(requests[: 2 * slots], batch_size=slots)  # warm-up: first calls allocate
    cpu_before = time.process_time()
    driven = reference.drive(requests, batch_size=slots)
    cpu_s = time.process_time() - cpu_before
    wrong = sum(
        1 for index, tokens in enumerate(driven.tokens) if "".join(tokens) != expected[index % len(prompts)]
    )
    tokens_total = sum(len(tokens) for tokens in driven.tokens)
    return {
        "concurrency": concurrency,
        "batch_size": slots,
        "configured_batch_size": batch_size,
        "threads": torch.get_num_threads(),
        "requests_total": count,
        "tokens_total": tokens_total,
        "elapsed_s": driven.elapsed,
        "iterations": len(driven.batch_sizes),
        "mean_batch": sum(driven.batch_sizes) / len(driven.batch_sizes),
        "cpu_s": cpu_s,
        "errors": {"WRONG_TOKENS": wrong} if wrong else {},
        **figures(driven.token_times, driven.admitted, concurrency),
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m bench.generate_limit '<json spec>'", file=sys.stderr)
        return 2
    print(json.dumps(run(json.loads(args[0]))), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
