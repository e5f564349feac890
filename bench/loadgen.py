"""Closed-loop asyncio load generators: C clients, each sending its next request as soon as the last
one is answered, for a warm-up and then a measured window. Bounded in time and in request count.

Clients: gRPC unary with pre-serialized request bytes and undecoded responses (the client costs as
little as a Python client can), REST over aiohttp, and StreamPredictions (relay latency of each
streamed message: the client's receive time minus the wall clock the handler stamped at its send).
"""

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc

from bench.payloads import prediction_of, read_stream_stamp
from bench.stats import latency_summary_ms

T = TypeVar("T")
DEFAULT_CALL_TIMEOUT_S = 30.0
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", -1),
    # Reconnect quickly: a benchmark channel is opened right after a server start.
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 500),
]


class HttpStatusError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status


def classify(exc: BaseException) -> str:
    """A short label for an error (gRPC status name, HTTP status, timeout, or the exception type)."""
    if isinstance(exc, grpc.aio.AioRpcError):
        return str(exc.code().name)
    if isinstance(exc, HttpStatusError):
        return f"HTTP {exc.status}"
    if isinstance(exc, asyncio.TimeoutError | TimeoutError):
        return "TIMEOUT"
    return type(exc).__name__


@dataclass
class LoadResult:
    concurrency: int
    duration_s: float
    latencies_ns: list[int] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    # Streaming only: per-message relay latencies.
    relay_ns: list[int] = field(default_factory=list)
    messages: int = 0
    # Answers that arrived inside the window, whenever their call started: the throughput. (Counting
    # only calls that also started inside it would drop one latency's worth of answers at each edge:
    # 15% of a 3 s window when calls take 450 ms.)
    completed_in_window: int = 0
    # Every answer of the run, warm-up and tail included: what the servers' CPU time is divided by.
    completed: int = 0

    @property
    def requests(self) -> int:
        """Calls that started and ended inside the window: the latency samples."""
        return len(self.latencies_ns)

    @property
    def throughput_rps(self) -> float:
        return self.completed_in_window / self.duration_s if self.duration_s > 0 else 0.0


async def closed_loop(
    call: Callable[[], Awaitable[Any]],
    *,
    concurrency: int,
    duration_s: float,
    warmup_s: float = 0.0,
    max_requests: int = 10_000_000,
    call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
    on_result: Callable[[Any, LoadResult, bool], None] | None = None,
) -> LoadResult:
    """Run ``concurrency`` clients calling ``call()`` back to back. Latencies are kept for calls that
    started after the warm-up and ended inside the window (errors are counted the same way); the
    throughput counts every answer that arrived inside the window."""
    if concurrency < 1 or duration_s <= 0:
        raise ValueError("concurrency >= 1 and duration_s > 0 are required")
    result = LoadResult(concurrency=concurrency, duration_s=duration_s)
    start = time.perf_counter_ns()
    window_start = start + int(warmup_s * 1e9)
    window_end = window_start + int(duration_s * 1e9)
    issued = 0

    async def client() -> None:
        nonlocal issued
        while issued < max_requests:
            sent = time.perf_counter_ns()
            if sent >= window_end:
                return
            issued += 1
            try:
                answer = await call()
            except Exception as exc:
                if sent >= window_start:
                    result.errors[classify(exc)] += 1
                await asyncio.sleep(0.001)  # an erroring server must not turn the loop into a spin
                continue
            done = time.perf_counter_ns()
            result.completed += 1
            if window_start <= done <= window_end:
                result.completed_in_window += 1
            measured = sent >= window_start and done <= window_end
            if measured:
                result.latencies_ns.append(done - sent)
            if on_result is not None:
                on_result(answer, result, measured)

    bound_s = warmup_s + duration_s + call_timeout_s + 5.0
    await asyncio.wait_for(asyncio.gather(*(client() for _ in range(concurrency))), timeout=bound_s)
    return result


def grpc_channel(target: str, credentials: grpc.ChannelCredentials | None = None) -> grpc.aio.Channel:
    if credentials is not None:
        return grpc.aio.secure_channel(target, credentials, options=CHANNEL_OPTIONS)
    return grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS)


async def grpc_unary_load(
    target: str,
    method: str,
    request: bytes,
    *,
    concurrency: int,
    duration_s: float,
    warmup_s: float,
    max_requests: int = 10_000_000,
    timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
    credentials: grpc.ChannelCredentials | None = None,
    before_call: Callable[[], None] | None = None,
) -> LoadResult:
    """Closed-loop unary calls of ``method`` with the same pre-serialized ``request`` on one channel
    (TLS with ``credentials``). ``before_call`` runs before each call, inside its measured time."""
    async with grpc_channel(target, credentials) as channel:
        # No (de)serializers: bytes go out as they are and come back undecoded.
        stub: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(method)

        def call() -> Awaitable[Any]:
            if before_call is not None:
                before_call()
            answer: Awaitable[Any] = stub(request, timeout=timeout_s)
            return answer

        return await closed_loop(
            call,
            concurrency=concurrency,
            duration_s=duration_s,
            warmup_s=warmup_s,
            max_requests=max_requests,
            call_timeout_s=timeout_s,
        )


async def grpc_stream_load(
    target: str,
    method: str,
    request: bytes,
    *,
    concurrency: int,
    duration_s: float,
    warmup_s: float,
    max_requests: int = 1_000_000,
    timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
) -> LoadResult:
    """Closed-loop server-streaming calls; every message must carry the handler's send stamp."""
    async with grpc_channel(target) as channel:
        stub: grpc.aio.UnaryStreamMultiCallable[bytes, bytes] = channel.unary_stream(method)

        async def call() -> list[int]:
            relays = []
            async for message in stub(request, timeout=timeout_s):
                received = time.time_ns()
                sent, _index = read_stream_stamp(prediction_of(message))
                relays.append(received - sent)
            return relays

        def keep(relays: list[int], result: LoadResult, measured: bool) -> None:
            if measured:
                result.relay_ns.extend(relays)
                result.messages += len(relays)

        return await closed_loop(
            call,
            concurrency=concurrency,
            duration_s=duration_s,
            warmup_s=warmup_s,
            max_requests=max_requests,
            call_timeout_s=timeout_s,
            on_result=keep,
        )


async def rest_load(
    url: str,
    body: bytes,
    content_type: str,
    *,
    concurrency: int,
    duration_s: float,
    warmup_s: float,
    max_requests: int = 10_000_000,
    timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
) -> LoadResult:
    """Closed-loop ``POST url`` with the same body over ``concurrency`` keep-alive connections."""
    import aiohttp

    connector = aiohttp.TCPConnector(limit=concurrency, force_close=False)
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    headers = {"content-type": content_type}
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def call() -> bytes:
            async with session.post(url, data=body, headers=headers) as response:
                answer = await response.read()
                if response.status != 200:
                    raise HttpStatusError(response.status)
                return answer

        return await closed_loop(
            call,
            concurrency=concurrency,
            duration_s=duration_s,
            warmup_s=warmup_s,
            max_requests=max_requests,
            call_timeout_s=timeout_s,
        )


async def hold_streams(
    target: str,
    method: str,
    request: bytes,
    *,
    count: int,
    channels: int,
    hold_s: float,
    measure: Callable[[], Coroutine[Any, Any, T]],
) -> tuple[int, T, Counter[str]]:
    """Open ``count`` streaming calls (spread over ``channels`` channels), wait ``hold_s``, run
    ``measure()`` while they are open, then cancel them all. Returns (calls still open, measure's
    result, how the calls that ended early ended)."""
    opened = [grpc_channel(target) for _ in range(max(1, channels))]
    calls: list[Any] = []
    try:
        for index in range(count):
            stub: grpc.aio.UnaryStreamMultiCallable[bytes, bytes] = opened[index % len(opened)].unary_stream(
                method
            )
            calls.append(stub(request, timeout=hold_s + 60.0))
        readers = [asyncio.create_task(_drain(call)) for call in calls]
        await asyncio.sleep(hold_s)
        ended = Counter(reader.result() for reader in readers if reader.done())
        still_open = count - sum(ended.values())
        measured = await measure()
        for call in calls:
            call.cancel()
        await asyncio.wait(readers, timeout=30.0)
        return still_open, measured, ended
    finally:
        for channel in opened:
            await channel.close()


async def _drain(call: Any) -> str:
    """Read a streaming call to its end; how it ended (OK, a status name, or CANCELLED)."""
    try:
        async for _ in call:
            pass
    except grpc.aio.AioRpcError as exc:
        return str(exc.code().name)
    except asyncio.CancelledError:
        return "CANCELLED"
    return "OK"


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on a fresh event loop (uvloop when installed)."""
    try:
        import uvloop

        factory: Callable[[], asyncio.AbstractEventLoop] | None = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - uvloop is a Sluice dependency
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro)


def summarize(result: LoadResult) -> dict[str, Any]:
    out: dict[str, Any] = {
        "requests": result.requests,
        "completed": result.completed,
        "duration_s": result.duration_s,
        "throughput_rps": result.throughput_rps,
        "errors": dict(result.errors),
        "latency_ms": latency_summary_ms(result.latencies_ns),
    }
    if result.relay_ns:
        out["messages"] = result.messages
        out["relay_ms"] = latency_summary_ms(result.relay_ns)
        # A sample of per-message relay latencies for the plot (every k-th, at most 5,000).
        step = max(1, len(result.relay_ns) // 5000)
        out["relay_sample_ms"] = [round(value / 1e6, 4) for value in result.relay_ns[::step]]
    return out
