"""Every service of the stack comes back on its own after a crash (issue 23's supervision targets under
compose): kill -9 of the service's processes in its container, then the restart policy starts the
container again. Measured and printed: until the container runs again, and until the stack serves
again through its published ports. The bounds asserted are far above what is measured."""

import json

import pytest

from tests.support.compose_stack import ComposeStack, answers, docker, wait_for, wait_until_serving

pytestmark = [pytest.mark.compose_slow, pytest.mark.timeout(600)]

RESTART_BOUND_S = 60
SERVING_BOUND_S = 120


def started_at(container: str) -> str:
    return docker("inspect", "-f", "{{.State.StartedAt}}", container).strip()


def running_again(container: str, before: str) -> bool:
    state = json.loads(docker("inspect", "-f", "{{json .State}}", container))
    return bool(state["Running"]) and state["StartedAt"] != before


def crash(container: str) -> None:
    """SIGKILL to every process of the container but its init (docker-init, PID 1), which then exits
    with the service: what a crash of the service looks like to the engine. (`docker kill` would be
    a manual stop, which restart policies leave alone.)"""
    docker("exec", container, "sh", "-c", "kill -9 -1")


def serving(stack: ComposeStack, service: str) -> bool:
    if service == "manager":
        return stack.management_answers()
    return answers(stack, timeout_s=5)


@pytest.mark.parametrize("service", ["redis", "manager", "gateway"])
def test_a_crashed_service_is_back_by_its_restart_policy(stack: ComposeStack, service: str) -> None:
    stack.scale_gateways(1)
    wait_until_serving(stack)
    workers = {c.id for c in stack.workers()}
    container = stack.container(service)
    before = started_at(container)
    crash(container)
    restart_s = wait_for(lambda: running_again(container, before), RESTART_BOUND_S, f"{service} restarted")
    serving_s = restart_s + wait_for(lambda: serving(stack, service), SERVING_BOUND_S, f"{service} serving")
    measured = {"restarted_s": round(restart_s, 2), "serving_s": round(serving_s, 2)}
    print(f"\nMEASURED {service} kill -9: {json.dumps(measured)}")
    assert {c.id for c in stack.workers(running_only=False)} == workers, "worker containers kept (adopted)"
