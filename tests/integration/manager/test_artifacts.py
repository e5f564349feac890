"""Model artifacts between a manager and a worker that does not see its models folder: the manager's
artifact endpoint (real aiohttp on loopback) and the worker's fetch into its host cache, over a real
Redis."""

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import redis.asyncio as aioredis
from sluice.redis import keys
from sluice.registry import artifact as model_artifact
from sluice.registry.records import VersionRecord
from sluice.registry.store import RegistryStore
from sluice_manager.models.artifact_server import ArtifactServer
from sluice_worker.broker.artifact_endpoint import RedisArtifactEndpoints
from sluice_worker.model_fetch import FetchError, model_folder


@pytest.fixture
async def served(redis_client: "aioredis.Redis", tmp_path: Path) -> AsyncIterator[VersionRecord]:
    """A registered version whose folder only the manager sees, and the manager's endpoint."""
    folder = tmp_path / "manager-models" / "abc"
    (folder / "sub").mkdir(parents=True)
    (folder / "handler.py").write_text("def handle(data, context):\n    return data\n")
    (folder / "sub" / "weights.bin").write_bytes(b"\x00\x01" * 100_000)
    record = VersionRecord(
        model_name="echo",
        version="1.0",
        model_url="echo.mar",
        model_dir=str(folder),
        handler="handler.py",
        artifact_sha256=model_artifact.digest(folder),
    )
    await RegistryStore(redis_client).add(record, make_default=True)
    server = ArtifactServer(redis_client, "http://127.0.0.1:0", "")
    await server.start()
    yield record
    await server.stop(1.0)


@pytest.fixture
def endpoints(redis_client: "aioredis.Redis") -> RedisArtifactEndpoints:
    """Where a worker learns the manager's endpoint: its broker side, on the test's Redis."""
    return RedisArtifactEndpoints(redis_client)


async def text(redis: "aioredis.Redis", key: str) -> str:
    raw = await redis.get(key)
    assert isinstance(raw, bytes)
    return raw.decode()


def elsewhere(record: VersionRecord) -> VersionRecord:
    """The record as a worker on another host sees it: the manager's folder is not there."""
    return dataclasses.replace(record, model_dir="/nonexistent/manager-models/abc")


async def test_a_worker_fetches_verifies_and_caches_the_model(
    served: VersionRecord, redis_client: "aioredis.Redis", endpoints: RedisArtifactEndpoints, tmp_path: Path
) -> None:
    cache = tmp_path / "worker-cache"
    folder = await model_folder(elsewhere(served), endpoints, cache, wait_s=10)
    assert folder == cache / served.artifact_sha256
    assert (folder / "sub" / "weights.bin").read_bytes() == b"\x00\x01" * 100_000
    assert model_artifact.digest(folder) == served.artifact_sha256
    assert [p.name for p in cache.iterdir()] == [served.artifact_sha256], "no partial files left"
    # The endpoint is not asked again: the cache answers (even with the manager gone).
    await redis_client.set(keys.ARTIFACT_URL, "http://127.0.0.1:9")
    assert await model_folder(elsewhere(served), endpoints, cache, wait_s=1) == folder


async def test_a_worker_that_sees_the_managers_folder_uses_it(
    served: VersionRecord, endpoints: RedisArtifactEndpoints, tmp_path: Path
) -> None:
    assert await model_folder(served, endpoints, tmp_path / "cache", wait_s=1) == Path(served.model_dir)
    assert not (tmp_path / "cache").exists()


async def test_workers_of_one_host_fetching_together_share_one_folder(
    served: VersionRecord, endpoints: RedisArtifactEndpoints, tmp_path: Path
) -> None:
    cache = tmp_path / "worker-cache"
    folders = await asyncio.gather(*(model_folder(elsewhere(served), endpoints, cache, 10) for _ in range(4)))
    assert set(folders) == {cache / served.artifact_sha256}
    assert [p.name for p in cache.iterdir()] == [served.artifact_sha256]


async def test_content_that_does_not_match_the_digest_is_refused(
    served: VersionRecord, endpoints: RedisArtifactEndpoints, tmp_path: Path
) -> None:
    tampered = dataclasses.replace(elsewhere(served), artifact_sha256="0" * 64)
    with pytest.raises(FetchError, match="digest"):
        await model_folder(tampered, endpoints, tmp_path / "cache", wait_s=1)
    assert list((tmp_path / "cache").iterdir()) == [], "nothing kept"


async def test_the_endpoint_wants_the_token(served: VersionRecord, redis_client: "aioredis.Redis") -> None:
    url = await text(redis_client, keys.ARTIFACT_URL)
    async with aiohttp.ClientSession() as session:
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            async with session.get(f"{url}/artifacts/echo/1.0", headers=headers) as response:
                assert response.status == 401
        token = await text(redis_client, keys.ARTIFACT_TOKEN)
        async with session.get(
            f"{url}/artifacts/echo/9.9", headers={"Authorization": f"Bearer {token}"}
        ) as response:
            assert response.status == 404


async def test_a_worker_with_no_endpoint_to_ask_gives_up_after_its_wait(
    served: VersionRecord, redis_client: "aioredis.Redis", endpoints: RedisArtifactEndpoints, tmp_path: Path
) -> None:
    await redis_client.set(keys.ARTIFACT_URL, "http://127.0.0.1:9")  # nothing listens there
    with pytest.raises(FetchError, match="cannot fetch"):
        await model_folder(elsewhere(served), endpoints, tmp_path / "cache", wait_s=1)
