"""The inline runner's guard thread on a real Redis: heartbeats while a call holds the loop, the
deadline's give-up commands and exit, and intermediate replies waiting out an outage."""

import threading
import time
from collections.abc import Callable, Iterator

import pytest
import redis
from sluice_worker.broker.call_guard import CallGuard
from sluice_worker.exit_codes import ExitCode

from tests.support.redis_server import RedisServer, free_port


@pytest.fixture
def sync_client(module_redis: RedisServer) -> Iterator["redis.Redis"]:
    client = redis.Redis.from_url(module_redis.url, socket_timeout=2.0)
    try:
        yield client
    finally:
        client.close()


def _guard(url: str, exits: list[int], beat_every_s: float = 0.1) -> CallGuard:
    return CallGuard(
        redis.Redis.from_url(url, socket_timeout=0.5), beat_every_s=beat_every_s, poll_s=0.02,
        exit_process=exits.append,
    )  # fmt: skip


def _until(condition: Callable[[], object], timeout_s: float = 5.0) -> bool:
    ends = time.monotonic() + timeout_s
    while time.monotonic() < ends:
        if condition():
            return True
        time.sleep(0.02)
    return False


def test_a_long_call_keeps_the_heartbeat(module_redis: RedisServer, sync_client: "redis.Redis") -> None:
    exits: list[int] = []
    guard = _guard(module_redis.url, exits)
    guard.present_as(lambda: [("SET", "guard:hb", "1", "PX", 300)], lambda: [("DEL", "guard:hb")])
    try:
        with guard.watching(30.0, list):
            # Three TTLs of a "call": the key stays because the guard renews it.
            for _ in range(9):
                time.sleep(0.1)
                assert _until(lambda: sync_client.exists("guard:hb"), 0.3)
        assert exits == []
    finally:
        guard.stop()


def test_no_beat_between_calls(module_redis: RedisServer, sync_client: "redis.Redis") -> None:
    # The loop's own heartbeat task beats while no call runs: the guard stays quiet.
    guard = _guard(module_redis.url, [])
    guard.present_as(lambda: [("INCR", "guard:quiet")], list)
    try:
        time.sleep(0.4)
        assert sync_client.get("guard:quiet") is None
    finally:
        guard.stop()


def test_past_the_deadline_the_call_is_given_up_and_the_process_exits(
    module_redis: RedisServer, sync_client: "redis.Redis"
) -> None:
    exits: list[int] = []
    guard = _guard(module_redis.url, exits, beat_every_s=10.0)
    guard.present_as(list, lambda: [("DEL", "guard:worker")])
    sync_client.set("guard:worker", "present")
    try:
        with guard.watching(0.2, lambda: [("RPUSH", "guard:answers", "worker died")], ExitCode.LOAD_FAILED):
            assert _until(lambda: exits == [int(ExitCode.LOAD_FAILED)])
        assert sync_client.lrange("guard:answers", 0, -1) == [b"worker died"]
        assert not sync_client.exists("guard:worker")
    finally:
        guard.stop()


def test_a_call_that_returns_in_time_is_not_given_up(module_redis: RedisServer) -> None:
    exits: list[int] = []
    guard = _guard(module_redis.url, exits)
    try:
        with guard.watching(0.3, lambda: [("SET", "guard:never", "1")]):
            time.sleep(0.05)
        time.sleep(0.5)
        assert exits == []
    finally:
        guard.stop()


def test_intermediate_replies_wait_out_an_outage_until_the_call_is_given_up() -> None:
    # Nothing listens on this port: the publish retries, and returns once the call is given up.
    guard = _guard(f"redis://127.0.0.1:{free_port()}", [])
    given_up = threading.Event()
    threading.Timer(0.5, given_up.set).start()
    started = time.monotonic()
    try:
        guard.publish([("XADD", "replies", "*", "m", "chunk")], given_up)
        assert 0.4 < time.monotonic() - started < 5.0
    finally:
        guard.stop()


def test_intermediate_replies_go_out_in_order(module_redis: RedisServer, sync_client: "redis.Redis") -> None:
    guard = _guard(module_redis.url, [])
    try:
        for n in range(3):
            guard.publish([("RPUSH", "guard:chunks", f"chunk-{n}")], threading.Event())
        assert sync_client.lrange("guard:chunks", 0, -1) == [b"chunk-0", b"chunk-1", b"chunk-2"]
    finally:
        guard.stop()
