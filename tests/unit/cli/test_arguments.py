"""The sluice command line: subcommands, TorchServe's spellings, and what reaches the services."""

import os
from pathlib import Path

import pytest
from sluice_cli.main import build_parser, normalize
from sluice_cli.plan import build_plan
from sluice_cli.runtime import RuntimeDir
from sluice_cli.services import StartOptions, redis_command, service_env, write_redis_config
from sluice_cli.settings import CliSettings


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["start", "--foreground"], ["start", "--foreground"]),
        (["--start", "--model-store", "s"], ["start", "--model-store", "s"]),
        (["--model-store", "s", "--start"], ["start", "--model-store", "s"]),
        (["--stop"], ["stop"]),
        (["stop"], ["stop"]),
        (["--model-store", "s", "--models", "a.mar"], ["start", "--model-store", "s", "--models", "a.mar"]),
        ([], []),
        (["--help"], ["--help"]),
        (["--version"], ["--version"]),
    ],
)
def test_torchserve_spellings(argv: list[str], expected: list[str]) -> None:
    assert normalize(argv) == expected


def test_start_flags() -> None:
    args = build_parser().parse_args(
        normalize(
            [
                "--start",
                "--model-store",
                "store",
                "--models",
                "a.mar",
                "b=b.mar",
                "--ts-config",
                "c.properties",
                "--ncs",
                "--foreground",
                "--dt",
                "--enable-model-api",
                "--log-config",
                "log4j2.xml",
            ]
        )
    )
    assert args.command == "start"
    assert args.model_store == Path("store")
    assert args.models == ["a.mar", "b=b.mar"]
    assert args.ts_config == Path("c.properties")
    assert args.ncs
    assert args.foreground
    assert args.disable_token_auth
    assert args.enable_model_api
    assert args.log_config == "log4j2.xml"


def test_long_spellings_of_short_flags() -> None:
    args = build_parser().parse_args(["start", "--no-config-snapshots", "--disable-token-auth"])
    assert args.ncs
    assert args.disable_token_auth
    assert not args.enable_model_api
    assert not args.foreground


def test_the_workflow_store_flag_is_taken_not_ignored() -> None:
    args = build_parser().parse_args(["start", "--workflow-store", "wf"])
    assert args.workflow_store == Path("wf")


def test_service_env_carries_the_flags(tmp_path: Path) -> None:
    options = StartOptions(
        model_store=tmp_path / "store",
        workflow_store=tmp_path / "workflows",
        models="demo=demo.mar",
        ts_config=tmp_path / "config.properties",
        disable_token_auth=True,
        enable_model_api=True,
    )
    env = service_env({"PATH": "/bin"}, options, home=tmp_path / "var", redis_url="redis://127.0.0.1:6399/0")
    assert env["PATH"] == "/bin"
    assert env["SLUICE_HOME"] == str(tmp_path / "var")
    assert env["SLUICE_REDIS_URL"] == "redis://127.0.0.1:6399/0"
    assert env["SLUICE_MODEL_STORE"] == str(tmp_path / "store")
    assert env["SLUICE_WORKFLOW_STORE"] == str(tmp_path / "workflows")
    assert env["SLUICE_LOAD_MODELS"] == "demo=demo.mar"
    assert env["SLUICE_TS_CONFIG"] == str(tmp_path / "config.properties")
    assert env["SLUICE_DISABLE_TOKEN_AUTHORIZATION"] == "true"
    assert env["SLUICE_ENABLE_MODEL_API"] == "true"


def test_service_env_without_flags_sets_only_what_it_must(tmp_path: Path) -> None:
    env = service_env({}, StartOptions(), home=tmp_path, redis_url="redis://x:1/0")
    assert set(env) == {"SLUICE_HOME", "SLUICE_REDIS_URL", "PYTHONUNBUFFERED"}


def test_private_redis_is_locked_down(tmp_path: Path) -> None:
    argv = redis_command(6399, tmp_path / "redis", tmp_path / "redis.conf")
    assert argv[:2] == ["redis-server", str(tmp_path / "redis.conf")]
    pairs = dict(zip(argv[2::2], argv[3::2], strict=True))
    assert pairs["--port"] == "6399"
    assert pairs["--bind"] == "127.0.0.1"
    assert pairs["--protected-mode"] == "yes"
    assert pairs["--appendonly"] == "yes"
    assert pairs["--maxmemory-policy"] == "noeviction"
    assert pairs["--dir"] == str(tmp_path / "redis")
    assert "--unixsocket" not in pairs


def test_private_redis_socket_is_for_its_user_only(tmp_path: Path) -> None:
    argv = redis_command(6399, tmp_path / "redis", tmp_path / "redis.conf", tmp_path / "redis" / "redis.sock")
    pairs = dict(zip(argv[2::2], argv[3::2], strict=True))
    assert pairs["--unixsocket"] == str(tmp_path / "redis" / "redis.sock")
    assert pairs["--unixsocketperm"] == "700"
    assert pairs["--bind"] == "127.0.0.1"


def test_private_redis_password_is_new_each_start_and_only_in_a_private_file(tmp_path: Path) -> None:
    config = tmp_path / "redis.conf"
    first = write_redis_config(config)
    assert config.read_text() == f"requirepass {first}\n"
    assert config.stat().st_mode & 0o777 == 0o600
    second = write_redis_config(config)
    assert second != first
    assert len(second) >= 40
    assert config.read_text() == f"requirepass {second}\n"
    assert first not in " ".join(redis_command(6399, tmp_path / "redis", config))


def test_cli_settings_from_config_properties(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TS_CONFIG_FILE", "SLUICE_HOME", "SLUICE_EXTERNAL_REDIS_URL"):
        monkeypatch.delenv(name, raising=False)
    config = tmp_path / "config.properties"
    config.write_text("grpc_inference_port=17070\nsluice_redis_port=16399\ngrpc_inference_address=0.0.0.0\n")
    monkeypatch.setenv("SLUICE_TS_CONFIG", str(config))
    settings = CliSettings()
    assert settings.grpc_inference_port == 17070
    assert settings.gateway_target == "127.0.0.1:17070"
    assert settings.service_redis_url() == "redis://127.0.0.1:16399/0"
    assert settings.service_redis_url(Path("/h/redis/redis.sock")) == "unix:///h/redis/redis.sock?db=0"
    assert settings.service_redis_url(password="p-w_1") == "redis://:p-w_1@127.0.0.1:16399/0"
    assert (
        settings.service_redis_url(Path("/h/redis/redis.sock"), "p-w_1")
        == "unix://:p-w_1@/h/redis/redis.sock?db=0"
    )
    config.write_text("sluice_redis_url=redis://10.1.1.1:6379/2\n")
    assert CliSettings().service_redis_url(Path("/h/redis/redis.sock"), "pw") == "redis://10.1.1.1:6379/2"
    monkeypatch.delenv("SLUICE_TS_CONFIG")
    defaults = CliSettings()
    assert defaults.gateway_target == "127.0.0.1:7070"
    assert defaults.service_redis_url() == "redis://127.0.0.1:6399/0"
    assert defaults.home == Path("var")
    monkeypatch.setenv("SLUICE_HOME", os.fspath(tmp_path / "h"))
    assert CliSettings().home == tmp_path / "h"


def test_log_rotation_limits_reach_the_supervisor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TS_CONFIG_FILE", "SLUICE_LOG_MAX_BYTES", "SLUICE_LOG_BACKUPS"):
        monkeypatch.delenv(name, raising=False)
    config = tmp_path / "config.properties"
    monkeypatch.setenv("SLUICE_TS_CONFIG", str(config))
    config.write_text("")
    defaults = CliSettings()
    assert (defaults.log_max_bytes, defaults.log_backups) == (100 * 1024 * 1024, 5)  # TorchServe's log4j2
    config.write_text("sluice_log_max_bytes=1048576\nsluice_log_backups=2\n")
    runtime = RuntimeDir.at(tmp_path / "var")
    runtime.prepare()
    plan = build_plan(CliSettings(), StartOptions(), {}, runtime, fresh=False)
    assert (plan.log_max_bytes, plan.log_backups) == (1048576, 2)
    assert [service.name for service in plan.services] == ["redis", "manager", "gateway"]
