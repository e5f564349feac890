"""The compose tier: docker-compose.yml on a real Docker engine, driven from the host against its
127.0.0.1 ports. ``-m compose`` (in ``make test``): the fast checks; ``-m compose_slow`` (``make
test-compose``): faults under load and supervision. Unless ``-m`` names one of them, or without an
engine or the images (scripts/compose_images.sh), every test here is skipped with the reason."""

from collections.abc import Iterator

import pytest

from tests.support.compose_stack import ComposeStack, running, unavailable_reason
from tests.support.models import write_mar
from tests.support.steady_load import sleeper_model

COMPOSE_MARKERS = ("compose", "compose_slow")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "compose" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="needs a Docker engine and minutes: make test (-m compose), "
                            "make test-compose (-m compose_slow)")  # fmt: skip
    for item in items:
        if any(item.get_closest_marker(name) for name in COMPOSE_MARKERS):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComposeStack]:
    """The stack with its demo model served, and ``sleeper.mar`` in its model store (not registered)."""
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    built = ComposeStack.create(tmp_path_factory.mktemp("compose"))
    write_mar(sleeper_model(), built.store).chmod(0o644)
    with running(built):
        yield built
