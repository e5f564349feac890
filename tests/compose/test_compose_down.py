"""`make compose-down` (scripts/compose_down.sh) leaves nothing of a stack behind: not its services, not
the worker containers its manager started (which outlive the manager), not its network (nor, with
REMOVE_VOLUMES=1, its volumes)."""

import pytest

from tests.support.compose_stack import ComposeStack, docker, unavailable_reason, wait_until_serving

pytestmark = [pytest.mark.compose, pytest.mark.timeout(600)]


def test_compose_down_removes_the_stack_and_its_worker_containers(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    stack = ComposeStack.create(tmp_path_factory.mktemp("down"))
    try:
        stack.up()
        wait_until_serving(stack)
        cluster = stack.cluster_id()
        assert len(stack.workers("demo")) == 1
    finally:
        done = stack.down()
    assert done.returncode == 0, done.stdout + done.stderr
    assert stack.leftovers() == []
    assert docker("ps", "-aq", "--filter", f"label=io.sluice.cluster={cluster}").split() == []
    assert docker("volume", "ls", "-q", "--filter", f"name=^{stack.cache_volume}$").split() == []
