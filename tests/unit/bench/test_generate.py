"""The pure parts of `make bench-generate`: what a cell's streams count as, the limit's closed-loop
schedule, the rounds' order and the report's goals."""

from typing import Any

import pytest

from bench import generate, generate_report
from bench.generate_limit import closed_loop_sent, figures
from bench.generate_load import INCOMPLETE, WRONG, Stream, StreamLoad, check, summarize

MS = 1_000_000


def stream(sent_ms: int, token_ms: list[int], *, error: str | None = None) -> Stream:
    made = Stream(prompt=0, sent_ns=sent_ms * MS, token_ns=[t * MS for t in token_ms], error=error)
    made.chunks = len(token_ms)
    return made


def test_check_tells_wrong_from_incomplete() -> None:
    assert check("abc", "abc") is None
    assert check("ab", "abc") == INCOMPLETE
    assert check("abd", "abc") == WRONG


def test_summarize_counts_tokens_ttft_and_gaps_inside_the_window() -> None:
    load = StreamLoad(concurrency=2, window_start_ns=100 * MS, window_end_ns=200 * MS)
    load.streams = [
        stream(50, [90, 110, 120]),  # sent in the warm-up: its tokens count, not its TTFT
        stream(120, [130, 140, 150]),  # all inside
        stream(180, [195, 210]),  # ends after the window
        stream(190, [230, 240]),  # its first token after the window: its TTFT counts all the same
        stream(150, [], error="UNAVAILABLE"),
    ]
    summary = summarize(load)
    assert summary["tokens_in_window"] == 2 + 3 + 1
    assert summary["tokens_per_s"] == pytest.approx(6 / 0.1)
    assert summary["ttft_samples"] == 3  # 10, 15 and 40 ms
    assert summary["ttft_ms"]["p50"] == pytest.approx(15.0)
    # gaps with both ends inside: 110->120, 130->140, 140->150
    assert summary["itl_samples"] == 3
    assert summary["itl_ms"]["p50"] == pytest.approx(10.0)
    assert summary["requests_completed_in_window"] == 2
    assert summary["errors"] == {"UNAVAILABLE": 1}
    assert summary["merged_tokens"] == 0


def test_a_chunk_of_several_tokens_counts_each_token() -> None:
    merged = Stream(prompt=0, sent_ns=0)
    merged.add("ab", 5 * MS)
    merged.add("c", 7 * MS)
    assert merged.token_ns == [5 * MS, 5 * MS, 7 * MS]
    load = StreamLoad(1, 0, 10 * MS, [merged])
    assert summarize(load)["merged_tokens"] == 1


def test_closed_loop_sent_starts_each_later_request_at_an_earlier_end() -> None:
    # 2 clients, 4 requests: requests 2 and 3 go out as the first two requests end (in end order).
    assert closed_loop_sent([3.0, 1.0, 4.0, 3.5], 2) == [0.0, 0.0, 1.0, 3.0]
    assert closed_loop_sent([1.0, 2.0], 4) == [0.0, 0.0]


def test_limit_figures_count_tokens_until_the_last_admission() -> None:
    # One slot: three requests of two tokens, one iteration per 1 s.
    times = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
    result = figures(times, admitted=[0.0, 2.0, 4.0], concurrency=1)
    assert result["steady_s"] == 4.0
    assert result["tokens_in_window"] == 4
    assert result["tokens_per_s"] == 1.0
    assert result["ttft_ms"]["p50"] == pytest.approx(1000.0)
    assert result["itl_ms"]["max"] == pytest.approx(1000.0)


def test_rounds_alternate_the_order_of_every_cell() -> None:
    sizes = generate.Sizes(concurrency=(1, 8), systems=("sluice_grpc", "inprocess"))
    first = generate.rounds_order(sizes, 0)
    assert first == [("sluice_grpc", 1), ("sluice_grpc", 8), ("inprocess", 1), ("inprocess", 8)]
    assert generate.rounds_order(sizes, 1) == first[::-1]
    assert generate.rounds_order(sizes, 2) == first


def cell(system: str, concurrency: int, round_: int, tokens: float, **extra: Any) -> dict[str, Any]:
    return {
        "kind": "generate_cell",
        "system": system,
        "concurrency": concurrency,
        "round": round_,
        "tokens_per_s": tokens,
        "ttft_ms": {"p50": 10.0, "p99": extra.get("ttft_p99", 20.0)},
        "itl_ms": {"p50": 2.0, "p99": extra.get("itl_p99", 4.0)},
        "errors_total": 0,
        "cpu_us_per_token": {"gateway": 10.0, "worker": 20.0, "client": 5.0},
        "redis_commands_per_token": {"xadd": 0.5, "xreadgroup": 0.25},
    }


def test_goals_are_judged_on_medians_of_rounds() -> None:
    records = [
        cell("sluice_grpc", 8, 0, 300.0),
        cell("sluice_grpc", 8, 1, 320.0),
        cell("sluice_grpc", 64, 0, 900.0, itl_p99=7.0),
        cell("torchserve_rest", 8, 0, 150.0, ttft_p99=30.0),
        cell("torchserve_rest", 64, 0, 700.0, ttft_p99=10.0),
        cell("inprocess", 64, 0, 1000.0),
    ]
    verdicts = generate_report.goals(generate_report.cells(records))
    assert [v.system for v in verdicts] == ["sluice_grpc"] * 4
    tokens, ttft, limit, itl = verdicts
    assert tokens.met is False  # 2.07x at C=8, 1.29x at C=64
    assert ttft.met is False  # 20 > 10 ms at C=64
    assert limit.met is True  # 90% of the limit
    assert itl.met is False  # 7 > 3 x 2 ms at C=64
    text = generate_report.render(records)
    dash, times = "\N{EN DASH}", "\N{MULTIPLICATION SIGN}"
    assert f"| Sluice CB, gRPC | 8 | 310 [300{dash}320] | 2.07{times} |" in text
    assert "xadd 0.50" in text
