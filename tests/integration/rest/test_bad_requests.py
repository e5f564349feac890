"""Requests aiohttp cannot parse (a request line or a header over its 8190-byte limit), sent in a
loop to the real listeners: every client gets its 400, and the log gets one line per event without a
traceback, at a bounded rate, then a line counting what it held back. The gateway's inference port
and the manager's management port run as real processes; the summary is checked on an in-process
listener with a short window."""

import asyncio
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web
from sluice.transport.bad_request_log import LogBudget
from sluice.transport.http_listener import BAD_REQUEST_LOG_LIMIT, HttpListener, ListenAddress
from structlog.testing import capture_logs

from tests.support import management_stack, stack
from tests.support.redis_server import RedisServer, free_port

ROUNDS = 100  # of each kind: far more requests than the log may hold lines
TOO_LONG = b"a" * 10_000
LONG_LINE = b"GET /" + TOO_LONG + b" HTTP/1.1\r\nHost: localhost\r\n\r\n"
LONG_HEADER = b"GET /ping HTTP/1.1\r\nHost: localhost\r\nX-Padding: " + TOO_LONG + b"\r\n\r\n"


def answer_to(port: int, request: bytes, timeout_s: float = 10.0) -> bytes:
    """The raw answer to ``request`` on a fresh connection, read until the server closes it."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        sock.sendall(request)
        chunks: list[bytes] = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def refused(answer: bytes) -> bool:
    # aiohttp answers in HTTP/1.0 when it could not read the request's version.
    return answer.startswith((b"HTTP/1.0 400 ", b"HTTP/1.1 400 "))


def flood(port: int) -> None:
    for request in [LONG_LINE, LONG_HEADER] * ROUNDS:
        answer = answer_to(port, request)
        assert refused(answer), answer[:200]


def wait_listening(port: int, service: stack.Service, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert service.alive(), service.log()
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"nothing listens on {port}:\n{service.log()}")


def new_lines(service: stack.Service, offset: int) -> list[str]:
    return service.log_path.read_bytes()[offset:].decode(errors="replace").splitlines()


def check_log(lines: list[str], listener: str) -> None:
    assert not [line for line in lines if "Traceback" in line or "Error handling request" in line]
    refused = [line for line in lines if "bad http request refused" in line]
    assert 1 <= len(refused) <= BAD_REQUEST_LOG_LIMIT, refused
    assert all(f"listener={listener}" in line and "client=127.0.0.1" in line for line in refused)
    assert all("LineTooLong: request line or header over 8190 bytes" in line for line in refused), refused
    assert not [line for line in lines if "aaaaaaaa" in line], "the request's bytes stay out of the log"
    # 2 * ROUNDS refused requests; a handful of lines.
    assert len(lines) <= BAD_REQUEST_LOG_LIMIT + 5, lines


@pytest.fixture
def gateway(redis_server: RedisServer, tmp_path: Path) -> Iterator[tuple[stack.Service, int]]:
    port = free_port()
    service, _ = stack.start_gateway(redis_server.url, tmp_path, inference_address=f"http://127.0.0.1:{port}")
    try:
        wait_listening(port, service)
        yield service, port
    finally:
        service.stop()


def test_gateway_answers_400_and_logs_a_bounded_number_of_lines(gateway: tuple[stack.Service, int]) -> None:
    service, port = gateway
    offset = service.log_path.stat().st_size
    flood(port)
    check_log(new_lines(service, offset), "inference")


def test_manager_answers_400_and_logs_a_bounded_number_of_lines(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    (tmp_path / "store").mkdir()
    manager = management_stack.start_manager(redis_server.url, tmp_path)
    try:
        service = manager.service
        offset = service.log_path.stat().st_size
        flood(int(manager.rest_url.rsplit(":", 1)[1]))
        check_log(new_lines(service, offset), "management")
    finally:
        manager.service.stop()


async def test_what_the_window_held_back_is_counted_when_it_closes() -> None:
    app = web.Application()
    budget = LogBudget(limit=3, interval_s=0.5)
    listener = HttpListener(
        app, ListenAddress("127.0.0.1", 0), name="test", cancel_on_disconnect=False, bad_requests=budget
    )
    port = await listener.start()
    try:
        with capture_logs() as logs:
            for _ in range(10):
                answer = await asyncio.to_thread(answer_to, port, LONG_LINE)
                assert refused(answer), answer[:200]
            # No further request: the window's end alone writes the count.
            await asyncio.sleep(1.0)
    finally:
        await listener.stop(grace_s=0)
    events = [entry["event"] for entry in logs]
    assert events == ["bad http request refused"] * 3 + ["suppressed similar bad http requests"]
    assert logs[-1]["suppressed"] == 7
    assert {entry["listener"] for entry in logs} == {"test"}
