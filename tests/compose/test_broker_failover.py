"""The compose stack on Redis Sentinel (docker-compose.ha.yml): the master's container is killed while
clients keep calling; every call gets its own answer or a clear status, inference serves again, the
registry and the management API survive, and the killed master comes back as a replica. What the
failover cost is printed (the test's bounds are far above it)."""

import json
import time
from collections.abc import Iterator

import pytest

from tests.support.compose_stack import ComposeStack, docker, running, unavailable_reason, wait_for
from tests.support.models import write_mar
from tests.support.steady_load import SteadyLoad, sleeper_model, unclear

pytestmark = [pytest.mark.compose_slow, pytest.mark.timeout(900)]

MODEL = "sleeper"
CALL_TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def ha_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComposeStack]:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    built = ComposeStack.create(tmp_path_factory.mktemp("compose-ha"), files=("docker-compose.ha.yml",))
    write_mar(sleeper_model(), built.store).chmod(0o644)
    with running(built):
        yield built


def role(stack: ComposeStack, service: str) -> str:
    shown = docker("exec", stack.container(service), "redis-cli", "info", "replication", check=False)
    return next(
        (line.split(":", 1)[1].strip() for line in shown.splitlines() if line.startswith("role:")), ""
    )


def broker_state(stack: ComposeStack) -> str:
    """What each Redis server and Sentinel says, and the services' recent logs (for a failure)."""
    lines = []
    for service in ("redis", "redis-replica-1", "redis-replica-2"):
        shown = docker("exec", stack.container(service), "redis-cli", "info", "replication", check=False)
        lines.append(f"{service}: {' '.join(shown.split())[:300]}")
    for service in ("sentinel-1", "sentinel-2", "sentinel-3"):
        shown = docker("exec", stack.container(service), "redis-cli", "-p", "26379", "sentinel",
                       "get-master-addr-by-name", "sluice", check=False)  # fmt: skip
        lines.append(f"{service}: {' '.join(shown.split())}")
    return "\n".join(lines) + "\n" + stack.logs(tail=40)


def test_the_stack_serves_through_a_master_failover(ha_stack: ComposeStack) -> None:
    try:
        serves_through_a_master_failover(ha_stack)
    except BaseException:
        print(broker_state(ha_stack))
        raise


def serves_through_a_master_failover(stack: ComposeStack) -> None:
    status, body = stack.management("POST", f"/models?url={MODEL}.mar&initial_workers=1&synchronous=true")
    assert status == 200, body
    master = stack.container("redis")
    assert role(stack, "redis") == "master"
    stack.cluster_id()  # read (and kept) while the redis service runs: its container is killed below
    with SteadyLoad(stack.grpc_target, MODEL, stack.metadata(), clients=4, sleep_s=0.05,
                    timeout_s=CALL_TIMEOUT_S) as load:  # fmt: skip
        load.wait_for_calls(20)
        docker("kill", master)
        killed_at = time.monotonic()
        served_again_s = wait_for(
            lambda: any(call.ok and call.started > killed_at for call in load.calls()), 240, "inference again"
        )
        load.wait_for_calls(20)
    calls = load.calls()
    assert unclear(calls) == []
    failed = [call for call in calls if call.error]
    measured = {"served_again_s": round(served_again_s, 2), "calls": len(calls), "failed": len(failed)}
    print(f"\nMEASURED broker failover: {json.dumps(measured)}")
    status, listed = stack.management("GET", "/models")
    assert status == 200
    assert {model["modelName"] for model in listed["models"]} >= {"demo", MODEL}
    status, described = stack.management("PUT", f"/models/{MODEL}?min_worker=2&synchronous=true")
    assert status == 200, described
    stack.wait_for_workers(MODEL, 2)
    stack.compose("start", "redis", timeout_s=120)
    wait_for(lambda: role(stack, "redis") == "slave", 120, "the old master back as a replica")
    # The manager's container health check reaches Redis through the Sentinels too.
    wait_for(lambda: stack.health(stack.container("manager")) == "healthy", 120, "a healthy manager")
