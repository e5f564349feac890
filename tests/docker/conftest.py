"""The docker tier: tests against a real Docker engine (``make test`` starts one, see
scripts/docker_engine.sh). Without an engine every test here is skipped with the reason."""

import asyncio
import json
import secrets
from collections.abc import AsyncIterator

import aiodocker
import pytest
from aiodocker.exceptions import DockerError

# The image the tier runs its stand-in workers in: built without a registry by
# scripts/build_base_image.sh (python3 on Debian bookworm).
BASE_IMAGE = "local/base:bookworm"


@pytest.fixture
async def docker() -> AsyncIterator[aiodocker.Docker]:
    try:
        client = aiodocker.Docker()
    except AssertionError:  # aiodocker's way of saying it found no socket and no DOCKER_HOST
        pytest.skip("docker engine unavailable: no docker socket and no DOCKER_HOST")
    try:
        await client.system.info()
        await client.images.inspect(BASE_IMAGE)
    except (DockerError, OSError, aiodocker.exceptions.DockerContextInvalidError) as exc:
        await client.close()
        pytest.skip(f"docker engine unavailable: {exc}")
    yield client
    await client.close()


@pytest.fixture
async def cluster(docker: aiodocker.Docker) -> AsyncIterator[str]:
    """A cluster id of this test's own; its containers are removed afterwards, whatever happened."""
    cluster_id = f"t{secrets.token_hex(4)}"
    yield cluster_id
    filters = json.dumps({"label": [f"io.sluice.cluster={cluster_id}"]})
    leftovers = await docker.containers.list(all=True, filters=filters)
    await asyncio.gather(*(c.delete(force=True) for c in leftovers), return_exceptions=True)
