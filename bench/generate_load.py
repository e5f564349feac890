"""Closed-loop token-stream load for ``make bench-generate``: C clients, each sending its next
generation request as soon as the last one's stream ended, for a warm-up and then a measured window.

Each request records when it was sent and when each token arrived. A token is one ASCII character
(tiny_gpt's prompts are picked so that no generation reaches EOS), so a chunk that carries k
characters is k tokens arriving at once (a server that merged chunks shows as zero gaps, never as
fewer tokens). Every stream's text is compared with the model run in-process: a wrong or missing
token makes the request an error.

Clients: TorchServe gRPC ``StreamPredictions`` (one ``PredictionResponse`` per token, raw bytes on
the channel, parsed by this client) and REST ``POST /predictions/<model>`` read chunk by chunk
(aiohttp, keep-alive connections). Every loop is bounded in time and in request count; the whole
load has a deadline.

:func:`summarize` turns the streams into the cell's figures: output tokens/s (tokens that arrived
inside the window), time to first token and end-to-end latency (every request sent inside the window:
the calls in flight at its end are read to their end, so a queue wait longer than the rest of the
window is still counted), inter-token latencies (gaps between consecutive tokens of a request, both
inside the window: the steady state), errors (requests sent inside the window).
"""

import asyncio
import itertools
import json
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
from sluice.v1 import torchserve_inference_pb2

from bench.loadgen import HttpStatusError, classify, grpc_channel
from bench.payloads import STREAM_PREDICTIONS_METHOD, predictions_request
from bench.stats import latency_summary_ms

DEFAULT_CALL_TIMEOUT_S = 120.0
MAX_REQUESTS = 1_000_000
WRONG = "WRONG_TOKENS"
INCOMPLETE = "INCOMPLETE"
# After a failed call a client pauses this long: an erroring server must not turn the loop into a spin.
ERROR_PAUSE_S = 0.01


@dataclass(frozen=True)
class Prompts:
    """The fixed prompts, their request bodies and the text each one must stream."""

    texts: tuple[str, ...]
    max_new_tokens: int
    expected: tuple[str, ...]

    def body(self, index: int) -> bytes:
        return json.dumps({"prompt": self.texts[index], "max_new_tokens": self.max_new_tokens}).encode()


@dataclass
class Stream:
    """One request: when it was sent and when each token arrived (``perf_counter_ns``)."""

    prompt: int
    sent_ns: int
    token_ns: list[int] = field(default_factory=list)
    chunks: int = 0
    text: str = ""
    error: str | None = None

    def add(self, text: str, at_ns: int) -> None:
        self.chunks += 1
        self.text += text
        self.token_ns.extend(at_ns for _ in text)


@dataclass
class StreamLoad:
    """A cell's raw streams and its window (``perf_counter_ns``)."""

    concurrency: int
    window_start_ns: int
    window_end_ns: int
    streams: list[Stream] = field(default_factory=list)

    @property
    def duration_s(self) -> float:
        return (self.window_end_ns - self.window_start_ns) / 1e9


Call = Callable[[int, Stream], Awaitable[None]]


async def closed_loop_streams(
    call: Call,
    prompts: Prompts,
    *,
    concurrency: int,
    duration_s: float,
    warmup_s: float,
    call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
    max_requests: int = MAX_REQUESTS,
) -> StreamLoad:
    """``concurrency`` clients calling ``call(prompt index, stream)`` back to back until the window
    ends; prompts are taken in turn from the fixed list. The calls in flight when the window ends
    are read to their end (a server left with abandoned streams would still be busy in the next
    cell)."""
    if concurrency < 1 or duration_s <= 0:
        raise ValueError("concurrency >= 1 and duration_s > 0 are required")
    start = time.perf_counter_ns()
    load = StreamLoad(concurrency, start + int(warmup_s * 1e9), start + int((warmup_s + duration_s) * 1e9))
    turns = itertools.count()
    issued = 0

    async def client() -> None:
        nonlocal issued
        while issued < max_requests:
            sent = time.perf_counter_ns()
            if sent >= load.window_end_ns:
                return
            issued += 1
            stream = Stream(next(turns) % len(prompts.texts), sent)
            load.streams.append(stream)
            try:
                await asyncio.wait_for(call(stream.prompt, stream), timeout=call_timeout_s)
            except Exception as exc:
                stream.error = classify(exc)
                await asyncio.sleep(ERROR_PAUSE_S)
                continue
            stream.error = check(stream.text, prompts.expected[stream.prompt])

    bound_s = warmup_s + duration_s + call_timeout_s + 10.0
    await asyncio.wait_for(asyncio.gather(*(client() for _ in range(concurrency))), timeout=bound_s)
    return load


def check(text: str, expected: str) -> str | None:
    """None when the stream is the expected text; else why not."""
    if text == expected:
        return None
    if expected.startswith(text):
        return INCOMPLETE
    return WRONG


# Clients ------------------------------------------------------------------------------------------
async def grpc_streams(
    target: str,
    model: str,
    prompts: Prompts,
    *,
    concurrency: int,
    duration_s: float,
    warmup_s: float,
    call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
) -> StreamLoad:
    """Closed-loop ``StreamPredictions`` on one channel; requests pre-serialized, one per prompt."""
    requests = [predictions_request(model, prompts.body(index)) for index in range(len(prompts.texts))]
    parse = torchserve_inference_pb2.PredictionResponse.FromString
    async with grpc_channel(target) as channel:
        method = STREAM_PREDICTIONS_METHOD
        stub: grpc.aio.UnaryStreamMultiCallable[bytes, bytes] = channel.unary_stream(method)

        async def call(prompt: int, stream: Stream) -> None:
            async for message in stub(requests[prompt], timeout=call_timeout_s):
                at = time.perf_counter_ns()
                stream.add(parse(message).prediction.decode("utf-8", errors="replace"), at)

        return await closed_loop_streams(
            call,
            prompts,
            concurrency=concurrency,
            duration_s=duration_s,
            warmup_s=warmup_s,
            call_timeout_s=call_timeout_s,
        )


async def rest_streams(
    url: str,
    prompts: Prompts,
    *,
    concurrency: int,
    duration_s: float,
    warmup_s: float,
    call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
) -> StreamLoad:
    """Closed-loop ``POST url`` with a JSON body over ``concurrency`` keep-alive connections, the
    chunked answer read HTTP chunk by HTTP chunk."""
    import aiohttp

    bodies = [prompts.body(index) for index in range(len(prompts.texts))]
    headers = {"content-type": "application/json"}
    connector = aiohttp.TCPConnector(limit=concurrency, force_close=False)
    timeout = aiohttp.ClientTimeout(total=call_timeout_s)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def call(prompt: int, stream: Stream) -> None:
            async with session.post(url, data=bodies[prompt], headers=headers) as response:
                if response.status != 200:
                    await response.read()
                    raise HttpStatusError(response.status)
                pending = b""
                async for data, end_of_chunk in response.content.iter_chunks():
                    pending += data
                    if end_of_chunk and pending:
                        stream.add(pending.decode("utf-8", errors="replace"), time.perf_counter_ns())
                        pending = b""
                if pending:
                    stream.add(pending.decode("utf-8", errors="replace"), time.perf_counter_ns())

        return await closed_loop_streams(
            call,
            prompts,
            concurrency=concurrency,
            duration_s=duration_s,
            warmup_s=warmup_s,
            call_timeout_s=call_timeout_s,
        )


# Figures ------------------------------------------------------------------------------------------
def summarize(load: StreamLoad) -> dict[str, Any]:
    """The cell's figures (times in milliseconds); see the module docstring for what counts where."""
    start, end = load.window_start_ns, load.window_end_ns
    ttft: list[int] = []
    itl: list[int] = []
    e2e: list[int] = []
    errors: Counter[str] = Counter()
    tokens_in_window = 0
    completed_in_window = 0
    for stream in load.streams:
        times = stream.token_ns
        tokens_in_window += sum(1 for at in times if start <= at <= end)
        itl.extend(b - a for a, b in itertools.pairwise(times) if a >= start and b <= end)
        if stream.error is None and times and start <= times[-1] <= end:
            completed_in_window += 1
        if stream.sent_ns < start:
            continue
        if stream.error is not None:
            errors[stream.error] += 1
        if times:
            ttft.append(times[0] - stream.sent_ns)
        if stream.error is None and times:
            e2e.append(times[-1] - stream.sent_ns)
    tokens_total = sum(len(stream.token_ns) for stream in load.streams)
    return {
        "concurrency": load.concurrency,
        "duration_s": load.duration_s,
        "tokens_per_s": tokens_in_window / load.duration_s if load.duration_s > 0 else 0.0,
        "tokens_in_window": tokens_in_window,
        "requests_completed_in_window": completed_in_window,
        "requests_total": len(load.streams),
        "tokens_total": tokens_total,
        "chunks_total": sum(stream.chunks for stream in load.streams),
        # Tokens that arrived in one chunk with others (0 when every chunk is one token).
        "merged_tokens": sum(len(s.token_ns) - s.chunks for s in load.streams if s.chunks),
        "ttft_ms": latency_summary_ms(ttft),
        "itl_ms": latency_summary_ms(itl),
        "e2e_ms": latency_summary_ms(e2e),
        "ttft_samples": len(ttft),
        "itl_samples": len(itl),
        "errors": dict(errors),
        "errors_total": sum(1 for stream in load.streams if stream.error is not None),
        "error_kinds_total": dict(Counter(s.error for s in load.streams if s.error is not None)),
    }
