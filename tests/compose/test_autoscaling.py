"""Autoscaling with the docker launcher: a burst of load on a model with ``minWorkers: 1,
maxWorkers: 3`` raises its worker containers, as the Docker engine lists them, to three, each of which
answers calls; once the load is gone the count returns to one, the stopped containers having drained
(exit 0), and no call was lost or refused. Timings are shortened in the model's model-config.yaml
(FAST_SCALING), as tests/e2e/test_autoscaling.py does with worker processes."""

import pytest

from tests.support.compose_stack import ComposeStack, engine_time, exit_codes, wait_for
from tests.support.models import FAST_SCALING, write_mar
from tests.support.steady_load import SteadyLoad, sleeper_model

pytestmark = [pytest.mark.compose, pytest.mark.timeout(600)]

MODEL = "surge"
LOW, HIGH = 1, 3
# Far above what happens: a worker container is READY within seconds, FAST_SCALING scales down ~3 s
# after the load.
SCALE_BOUND_S = 180


def containers(stack: ComposeStack) -> int:
    return len(stack.workers(MODEL))


def test_a_burst_scales_worker_containers_up_and_idling_scales_them_back(stack: ComposeStack) -> None:
    config = f"minWorkers: {LOW}\nmaxWorkers: {HIGH}\n{FAST_SCALING}"
    write_mar(sleeper_model(MODEL, config), stack.store).chmod(0o644)
    status, body = stack.management("POST", f"/models?url={MODEL}.mar&synchronous=true")
    assert status == 200, body
    try:
        stack.wait_for_workers(MODEL, LOW, timeout_s=SCALE_BOUND_S)
        since = engine_time()
        # Six callers with 0.3 s jobs keep every worker busy and jobs waiting: more than three
        # workers' worth, so the version holds at maxWorkers while it lasts.
        with SteadyLoad(stack.grpc_target, MODEL, stack.metadata(), clients=6, sleep_s=0.3) as load:
            up_s = wait_for(lambda: containers(stack) == HIGH, SCALE_BOUND_S, f"{HIGH} containers", 0.5)
            served_s = wait_for(
                lambda: len({call.host for call in load.calls() if call.ok}) == HIGH,
                SCALE_BOUND_S,
                f"calls answered by {HIGH} containers",
                0.5,
            )
            grown = stack.workers(MODEL)
        calls = load.calls()
        assert [call for call in calls if not call.ok] == [], "every call is answered, none refused"
        assert {call.host for call in calls} == {c.id[:12] for c in grown}, "the new containers served"

        down_s = wait_for(lambda: containers(stack) == LOW, SCALE_BOUND_S, f"{LOW} container", 0.5)
        (kept,) = stack.workers(MODEL)
        assert kept.id in {c.id for c in grown}
        stopped = {c.worker_id for c in grown} - {kept.worker_id}
        assert exit_codes(MODEL, since, engine_time()) == dict.fromkeys(stopped, 0), "they drained"

        events = [e for e in stack.log_events("manager", "workers scaled") if e.get("model") == MODEL]
        assert 2 <= len(events) <= 4, events
        scaled_to = [event["to_workers"] for event in events]
        assert max(scaled_to) == HIGH, events
        assert scaled_to[-1] == LOW, events
        print(
            f"{MODEL}: {HIGH} containers {up_s:.1f} s into the load, all serving {served_s:.1f} s later; "
            f"{len(calls)} calls; back to {LOW} {down_s:.1f} s after it"
        )
    finally:
        status, body = stack.management("DELETE", f"/models/{MODEL}")
        assert status == 200, body
        stack.wait_for_workers(MODEL, 0, timeout_s=SCALE_BOUND_S)
