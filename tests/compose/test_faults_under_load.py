"""Faults in the compose stack while clients keep calling: a killed worker container is replaced and
no call is lost, a restarted manager adopts the containers it left, a killed gateway fails only the
calls it held. What the recoveries took is printed (the tests' bounds are far above it)."""

import json
import time
from collections.abc import Iterator

import pytest

from tests.support.compose_stack import ComposeStack, docker, wait_for, wait_for_gateways
from tests.support.steady_load import Call, SteadyLoad

pytestmark = [pytest.mark.compose_slow, pytest.mark.timeout(900)]

MODEL = "sleeper"
CLIENTS = 6


@pytest.fixture(scope="module")
def sleeper(stack: ComposeStack) -> Iterator[str]:
    """``sleeper`` registered with two worker containers."""
    status, body = stack.management("POST", f"/models?url={MODEL}.mar&initial_workers=2&synchronous=true")
    assert status == 200, body
    stack.wait_for_workers(MODEL, 2)
    yield MODEL
    stack.management("DELETE", f"/models/{MODEL}")


def report(event: str, **measured: float | int) -> None:
    print(f"\nMEASURED {event}: {json.dumps({k: round(v, 2) for k, v in measured.items()})}")


def failures(calls: list[Call]) -> list[Call]:
    return [call for call in calls if not call.ok]


def replaced(stack: ComposeStack, victim: str) -> bool:
    """Two containers run again, the victim not among them."""
    running = {c.id for c in stack.workers(MODEL)}
    return victim not in running and len(running) == 2


def test_a_killed_worker_container_is_replaced_and_no_call_is_lost(stack: ComposeStack, sleeper: str) -> None:
    before = {c.id for c in stack.wait_for_workers(sleeper, 2)}
    victim = sorted(before)[0]
    with SteadyLoad(stack.grpc_target, sleeper, stack.metadata(), clients=CLIENTS, sleep_s=0.2) as load:
        load.wait_for_calls(2 * CLIENTS)
        killed_at = time.monotonic()
        docker("kill", victim)
        replaced_s = wait_for(lambda: replaced(stack, victim), 120, "a replacement container")
        load.wait_for_calls(2 * CLIENTS)
    calls = load.calls()
    assert failures(calls) == [], "every call is answered, each with its own answer"
    in_flight = [call for call in calls if call.started < killed_at < call.ended]
    answered_s = max((c.ended - killed_at for c in in_flight), default=0.0)
    report("worker container killed", replaced_s=replaced_s, calls=len(calls), in_flight=len(in_flight),
           in_flight_answered_after_kill_s=answered_s)  # fmt: skip


def test_a_restarted_manager_adopts_the_containers_it_left(stack: ComposeStack, sleeper: str) -> None:
    stack.wait_for_workers(sleeper, 2)
    before = {c.id for c in stack.workers()}
    with SteadyLoad(stack.grpc_target, sleeper, stack.metadata(), clients=CLIENTS, sleep_s=0.2) as load:
        load.wait_for_calls(CLIENTS)
        started = time.monotonic()
        stack.compose("restart", "manager", timeout_s=120)
        wait_for(stack.management_answers, 120, "the management API")
        back_s = time.monotonic() - started
        # Several reconcile passes of the new manager, under load.
        time.sleep(5)
        load.wait_for_calls(CLIENTS)
    assert failures(load.calls()) == []
    after = {c.id for c in stack.workers(running_only=False)}
    assert after == before, "the same containers, adopted: none replaced, none added"
    report("manager restarted", management_api_back_s=back_s, containers=len(after))


def test_a_killed_gateway_fails_only_the_calls_it_held(stack: ComposeStack, sleeper: str) -> None:
    stack.scale_gateways(2)
    wait_for_gateways(stack, 2)
    victim = stack.container("gateway", 2)
    with SteadyLoad(stack.grpc_target, sleeper, stack.metadata(), clients=CLIENTS, sleep_s=0.3) as load:
        load.wait_for_calls(2 * CLIENTS)
        kill_sent = time.monotonic()
        docker("kill", victim)
        killed = time.monotonic()
        load.wait_for_calls(3 * CLIENTS)
    calls = load.calls()
    failed = failures(calls)
    held = [call for call in calls if call.started < killed and call.ended > kill_sent]
    assert all(call.started < killed and call.ended > kill_sent for call in failed), (
        "only calls in flight when the gateway died fail"
    )
    assert len(failed) <= CLIENTS
    assert all(call.ok for call in calls if call.started > killed)
    report("gateway killed", calls=len(calls), in_flight=len(held), failed=len(failed))
    stack.scale_gateways(1)
    wait_for_gateways(stack, 1)
