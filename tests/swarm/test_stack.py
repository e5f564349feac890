"""Sluice deployed on the multi-node swarm, driven from the host through the front's 127.0.0.1 ports:
workers spread over nodes as the version scales, a drained node and a killed node under load (every
call answered once, with its own answer), a restarted manager adopting the worker services (and
removing one of a version nobody registered), and unregistering removing them. What the recoveries
took is printed (the bounds are far above it).

The tests run in this order and share one registered model."""

import json
import time
from collections.abc import Iterator

import pytest

from tests.support.compose_stack import docker, wait_for
from tests.support.steady_load import Call, SteadyLoad
from tests.support.swarm_stack import STACK, WORKER_IMAGE, SwarmStack

pytestmark = [pytest.mark.swarm, pytest.mark.timeout(900)]

MODEL = "sleeper"
CLIENTS = 6
# The bound on restoring a dead node's workers.
RESTORE_S = 90


def report(event: str, **measured: float | int) -> None:
    print(f"\nMEASURED {event}: {json.dumps({k: round(v, 2) for k, v in measured.items()})}")


def failures(calls: list[Call]) -> list[Call]:
    return [call for call in calls if not call.ok]


def assert_answered_once(calls: list[Call]) -> None:
    """Every call answered, each with its own answer (a call's command is unique: a duplicate or a
    wrong answer shows as a failure of the call it reached)."""
    assert failures(calls) == []
    commands = [call.command for call in calls]
    assert len(commands) == len(set(commands))


@pytest.fixture(scope="module")
def sleeper(swarm: SwarmStack) -> Iterator[str]:
    status, body = swarm.management("POST", f"/models?url={MODEL}.mar&initial_workers=3&synchronous=true")
    assert status == 200, body
    yield MODEL
    swarm.management("DELETE", f"/models/{MODEL}")


def gateway_nodes() -> set[str]:
    out = docker(
        "service", "ps", "--filter", "desired-state=running", "--format", "{{.Node}}", f"{STACK}_gateway"
    )
    return set(out.split())


def test_workers_spread_over_the_nodes_as_the_version_scales(swarm: SwarmStack, sleeper: str) -> None:
    nodes = swarm.wait_for_ready(sleeper, 3)
    assert len(nodes) >= 2, f"three workers on at least two nodes: {nodes}"
    assert len(swarm.worker_services(sleeper)) == 3, "one service per worker"
    status, body = swarm.management("PUT", f"/models/{sleeper}?min_worker=6&synchronous=true")
    assert status == 200, body
    nodes = swarm.wait_for_ready(sleeper, 6)
    assert set(nodes) == set(swarm.nodes()), f"six workers on every node: {nodes}"


def test_a_drained_node_fails_no_call(swarm: SwarmStack, sleeper: str) -> None:
    manager = swarm.manager_node()
    victim = max(
        (n for n in swarm.ready_nodes(sleeper) if n != manager and n not in gateway_nodes()), default=""
    )
    assert victim, "a worker node without the gateway"
    with SteadyLoad(swarm.grpc_target, sleeper, clients=CLIENTS, sleep_s=0.2) as load:
        load.wait_for_calls(2 * CLIENTS)
        drained_at = time.monotonic()
        swarm.set_availability(victim, "drain")
        try:
            moved_s = wait_for(
                lambda: (
                    victim not in swarm.ready_nodes(sleeper) and sum(swarm.ready_nodes(sleeper).values()) == 6
                ),
                RESTORE_S,
                "six READY workers off the drained node",
            )
            load.wait_for_calls(2 * CLIENTS)
        finally:
            swarm.set_availability(victim, "active")
    assert_answered_once(load.calls())
    report("node drained", workers_moved_s=moved_s, after_drain_s=time.monotonic() - drained_at,
           calls=len(load.calls()))  # fmt: skip


def test_a_killed_node_loses_no_call_and_its_workers_are_restored(swarm: SwarmStack, sleeper: str) -> None:
    # Swarm moves nothing back to the node drained before: scaling down and up again spreads the
    # version over every node (the launcher places each new worker where the version has fewest).
    for workers in (3, 6):
        status, body = swarm.management("PUT", f"/models/{sleeper}?min_worker={workers}&synchronous=true")
        assert status == 200, body
    nodes = swarm.wait_for_ready(sleeper, 6)
    manager = swarm.manager_node()
    victim = max((n for n in nodes if n != manager and n not in gateway_nodes()), key=lambda n: nodes[n])
    assert nodes[victim] >= 1, f"the node to kill runs workers: {nodes}"
    with SteadyLoad(swarm.grpc_target, sleeper, clients=CLIENTS, sleep_s=0.2) as load:
        load.wait_for_calls(2 * CLIENTS)
        killed_at = time.monotonic()
        docker("kill", victim)
        try:
            restored_s = wait_for(
                lambda: (
                    victim not in swarm.ready_nodes(sleeper) and sum(swarm.ready_nodes(sleeper).values()) == 6
                ),
                RESTORE_S,
                f"six READY workers within {RESTORE_S} s of the node's death",
            )
            load.wait_for_calls(2 * CLIENTS)
        finally:
            docker("start", victim)
    calls = load.calls()
    assert_answered_once(calls)
    in_flight = [call for call in calls if call.started < killed_at < call.ended]
    answered_s = max((c.ended - killed_at for c in in_flight), default=0.0)
    report("node killed", workers_on_node=nodes[victim], restored_s=restored_s, calls=len(calls),
           in_flight=len(in_flight),
           in_flight_answered_after_kill_s=answered_s)  # fmt: skip
    wait_for(lambda: swarm.nodes()[victim]["Status"] == "Ready", 120, "the killed node back in the swarm")


def orphan_service(swarm: SwarmStack) -> str:
    """A worker service of this cluster for a version nobody registered (as a manager that died
    after registering and before unregistering would leave one): a sleeping container."""
    labels = {
        "io.sluice.cluster": swarm.cluster_id(),
        "io.sluice.model": "ghost",
        "io.sluice.version": "1.0",
        "io.sluice.worker": "99999",
    }
    flags = [
        flag for k, v in labels.items() for flag in ("--label", f"{k}={v}", "--container-label", f"{k}={v}")
    ]
    return docker("service", "create", "--detach", "--quiet", "--name", "sluice-test-orphan", *flags,
                  "--restart-condition", "none", "--endpoint-mode", "dnsrr", "--init", WORKER_IMAGE,
                  "sleep", "600").strip()  # fmt: skip


def test_a_restarted_manager_adopts_the_worker_services(swarm: SwarmStack, sleeper: str) -> None:
    swarm.wait_for_ready(sleeper, 6)
    before = swarm.worker_services(sleeper)
    orphan = orphan_service(swarm)
    with SteadyLoad(swarm.grpc_target, sleeper, clients=CLIENTS, sleep_s=0.2) as load:
        load.wait_for_calls(CLIENTS)
        started = time.monotonic()
        docker("service", "update", "--force", "--detach", f"{STACK}_manager", timeout_s=120)
        wait_for(lambda: not swarm.management_answers(), 60, "the old manager gone")
        wait_for(swarm.management_answers, 180, "the new manager's API")
        back_s = time.monotonic() - started
        time.sleep(5)  # several reconcile passes of the new manager, under load
        load.wait_for_calls(CLIENTS)
    assert_answered_once(load.calls())
    assert swarm.worker_services(sleeper) == before, "the same services, adopted: none replaced, none added"
    report("manager restarted", management_api_back_s=back_s, services=len(before))
    wait_for(lambda: not docker("service", "ls", "-q", "--filter", f"id={orphan}"), 120, "the orphan removed")


def test_unregistering_removes_the_worker_services(swarm: SwarmStack, sleeper: str) -> None:
    assert swarm.worker_services(sleeper)
    status, body = swarm.management("DELETE", f"/models/{sleeper}")
    assert status == 200, body
    wait_for(lambda: swarm.worker_services(sleeper) == [], 120, "no worker service of the model left")
