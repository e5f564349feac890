"""Registration against a real Redis with archives made by the real torch-model-archiver 0.12 CLI;
unregister, scale and describe as domain operations."""

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from sluice.errors import ErrorCode, SluiceError
from sluice.redis import keys
from sluice.registry import reader as registry
from sluice.registry.records import BatchPolicy, VersionState
from sluice_manager.models.registration import Registrar, RegistrationConfig
from sluice_manager.models.removal import RemovalConfig, Remover
from sluice_manager.models.startup import remove_unused_model_dirs
from sluice_manager.models.version_config import RegisterOptions, ServerDefaults
from sluice_manager.stores import Stores

from tests.support.models import ECHO_HANDLER, echo_model, write_mar

ARCHIVER = Path(sys.executable).parent / "torch-model-archiver"
MODEL_CONFIG = """\
minWorkers: 0
maxWorkers: 0
batchSize: 4
maxBatchDelay: 50
responseTimeout: 33
batchPolicy: eager
handler:
  greeting: hello
"""


def archive(tmp_path: Path, fmt: str, name: str = "echo", version: str = "2.0") -> str:
    """Build an archive with the real CLI into the store; returns its url (store-relative)."""
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / "echo_handler.py").write_text(ECHO_HANDLER)
    (src / "model-config.yaml").write_text(MODEL_CONFIG)
    (src / "labels.json").write_text('{"0": "zero"}')
    store = tmp_path / "store"
    store.mkdir(exist_ok=True)
    subprocess.run(
        [str(ARCHIVER), "--model-name", name, "--version", version, "--handler", str(src / "echo_handler.py"),
         "--extra-files", str(src / "labels.json"), "--config-file", str(src / "model-config.yaml"),
         "--export-path", str(store), "--archive-format", fmt, "--force"],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return {"default": f"{name}.mar", "tgz": f"{name}.tar.gz", "no-archive": name}[fmt]


def exists(path: str) -> bool:
    return os.path.exists(path)


@pytest.fixture
def control(redis_client: "aioredis.Redis", tmp_path: Path) -> Registrar:
    wakes: list[int] = []
    plane = Registrar(
        Stores.on(redis_client),
        RegistrationConfig(
            model_store=tmp_path / "store",
            models_dir=tmp_path / "home" / "models",
            defaults=ServerDefaults(job_queue_size=50),
        ),
        wake=lambda: wakes.append(1),
        download=None,
    )
    return plane


@pytest.mark.parametrize("fmt", ["default", "tgz", "no-archive"])
async def test_real_archiver_output_registers(
    control: Registrar, redis_client: "aioredis.Redis", tmp_path: Path, fmt: str
) -> None:
    url = archive(tmp_path, fmt)
    record = await control.register(RegisterOptions(url=url))
    assert (record.model_name, record.version, record.model_url) == ("echo", "2.0", url)
    assert record.handler == "echo_handler.py"
    assert (record.batch_size, record.max_batch_delay_ms, record.response_timeout_s) == (4, 50, 33)
    assert record.batch_policy is BatchPolicy.EAGER
    assert record.job_queue_size == 50
    assert record.model_yaml_config["handler"] == {"greeting": "hello"}
    model_dir = Path(record.model_dir)
    assert model_dir.parent == tmp_path / "home" / "models"
    assert sorted(os.listdir(model_dir)) == [
        "MAR-INF", "echo_handler.py", "labels.json", "model-config.yaml",
    ]  # fmt: skip
    stored = await registry.get_version(redis_client, "echo", "2.0")
    assert stored == record
    assert await registry.resolve_version(redis_client, "echo", "") == "2.0"
    assert await redis_client.hget(keys.version_config("echo", "2.0"), "job_queue_size") == b"50"


async def test_register_twice_is_a_conflict_and_leaves_nothing_behind(
    control: Registrar, tmp_path: Path
) -> None:
    url = archive(tmp_path, "default")
    await control.register(RegisterOptions(url=url))
    with pytest.raises(SluiceError) as info:
        await control.register(RegisterOptions(url=url))
    assert info.value.code is ErrorCode.CONFLICT
    assert info.value.message == "Model version 2.0 is already registered for model echo"
    assert len(list((tmp_path / "home" / "models").iterdir())) == 1


async def test_startup_registration_adopts_what_is_registered(control: Registrar, tmp_path: Path) -> None:
    url = archive(tmp_path, "default")
    first = await control.register(RegisterOptions(url=url, at_startup=True))
    again = await control.register(RegisterOptions(url=url, at_startup=True))
    assert again == first
    assert [p.name for p in (tmp_path / "home" / "models").iterdir()] == [Path(first.model_dir).name]


async def test_refused_archive_leaves_no_state(
    control: Registrar, redis_client: "aioredis.Redis", tmp_path: Path
) -> None:
    spec = echo_model("echo")
    write_mar(spec.__class__(name="broken", handler="nope.py", files={"x.py": ""}), tmp_path / "store")
    with pytest.raises(SluiceError) as info:
        await control.register(RegisterOptions(url="broken.mar"))
    assert info.value.code is ErrorCode.INVALID_ARGUMENT
    assert list((tmp_path / "home" / "models").iterdir()) == []
    assert await redis_client.zrange(keys.MODELS, 0, -1) == []


async def test_no_model_store(redis_client: "aioredis.Redis", tmp_path: Path) -> None:
    plane = Registrar(
        Stores.on(redis_client),
        RegistrationConfig(model_store=None, models_dir=tmp_path),
        wake=lambda: None,
        download=None,
    )
    with pytest.raises(SluiceError, match="No model store"):
        await plane.register(RegisterOptions(url="a.mar"))


async def test_without_a_downloader_a_url_is_not_a_store_name(control: Registrar) -> None:
    with pytest.raises(SluiceError) as info:
        await control.register(RegisterOptions(url="https://example.com/m.mar", at_startup=True))
    assert (info.value.code, info.value.message) == (
        ErrorCode.INVALID_ARGUMENT, "Invalid model url: https://example.com/m.mar"
    )  # fmt: skip


async def test_versions_default_and_unregister(
    control: Registrar, redis_client: "aioredis.Redis", tmp_path: Path
) -> None:
    first = await control.register(RegisterOptions(url=archive(tmp_path, "default", version="1.0")))
    second = await control.register(RegisterOptions(url=archive(tmp_path, "tgz", version="2.0")))
    assert await registry.model_versions(redis_client, "echo") == ("1.0", {"1.0", "2.0"})
    remover = Remover(
        Stores.on(redis_client), RemovalConfig(tmp_path / "home" / "models", unregister_timeout_s=5)
    )

    with pytest.raises(SluiceError, match="Cannot remove default version"):
        await remover.run("echo", "1.0")
    assert await remover.run("echo", "2.0") == "2.0"
    assert not exists(second.model_dir)
    assert await redis_client.exists(keys.version_config("echo", "2.0")) == 0
    assert (await registry.model_versions(redis_client, "echo"))[1] == {"1.0"}

    assert await remover.run("echo", None) == "1.0"
    assert not exists(first.model_dir)
    assert await redis_client.zrange(keys.MODELS, 0, -1) == []
    assert await redis_client.exists(keys.model("echo")) == 0
    with pytest.raises(SluiceError) as info:
        await remover.run("echo", None)
    assert info.value.code is ErrorCode.MODEL_NOT_FOUND


async def test_unregister_marks_the_version_removing_first(
    control: Registrar, redis_client: "aioredis.Redis", tmp_path: Path
) -> None:
    await control.register(RegisterOptions(url=archive(tmp_path, "default")))
    # A worker record that never goes away: unregister waits (bounded), removes the keys anyway and
    # reports TorchServe's timeout.
    await redis_client.hset(keys.workers("echo", "2.0"), "9000", "{}")
    remover = Remover(
        Stores.on(redis_client), RemovalConfig(tmp_path / "home" / "models", unregister_timeout_s=1)
    )
    running = asyncio.ensure_future(remover.run("echo", None))
    await asyncio.sleep(0.3)
    state = await redis_client.hget(keys.version_config("echo", "2.0"), "state")
    assert state == VersionState.REMOVING.value.encode()
    with pytest.raises(SluiceError) as info:
        await running
    assert (info.value.code, info.value.message) == (
        ErrorCode.DEADLINE_EXCEEDED, "Timed out while cleaning resources: echo"
    )  # fmt: skip
    assert await redis_client.exists(keys.workers("echo", "2.0")) == 0


async def test_unused_model_folders_are_removed_at_startup(
    control: Registrar, redis_client: "aioredis.Redis", tmp_path: Path
) -> None:
    record = await control.register(RegisterOptions(url=archive(tmp_path, "default")))
    models = tmp_path / "home" / "models"
    (models / ".staging-abc123").mkdir()
    (models / ("a" * 32)).mkdir()
    (models / "not-ours").mkdir()
    assert await remove_unused_model_dirs(redis_client, models) == 2
    assert sorted(os.listdir(models)) == sorted([Path(record.model_dir).name, "not-ours"])
