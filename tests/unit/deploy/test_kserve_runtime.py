"""The KServe runtime manifest (deploy/kserve): a ClusterServingRuntime for the `pytorch` model format
on KServe v1, v2 and grpc-v2, whose arguments are a `sluice start` the CLI accepts and whose every
variable is a setting some Sluice service reads (a misspelt one would be silently ignored)."""

from pathlib import Path
from typing import Any

import yaml
from sluice.typed import field_hints
from sluice_cli.main import build_parser
from sluice_cli.settings import CliSettings
from sluice_gateway.settings import GatewaySettings
from sluice_manager.settings import ManagerSettings

RUNTIME = Path(__file__).resolve().parents[3] / "deploy" / "kserve" / "cluster-serving-runtime.yaml"


def runtime() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(RUNTIME.read_text())
    return loaded


def test_it_serves_torchserve_archives_on_every_kserve_protocol() -> None:
    manifest = runtime()
    assert (manifest["apiVersion"], manifest["kind"]) == (
        "serving.kserve.io/v1alpha1",
        "ClusterServingRuntime",
    )
    [model_format] = manifest["spec"]["supportedModelFormats"]
    assert (model_format["name"], model_format["autoSelect"]) == ("pytorch", True)
    assert set(manifest["spec"]["protocolVersions"]) == {"v1", "v2", "grpc-v2"}
    [container] = manifest["spec"]["containers"]
    assert container["name"] == "kserve-container"  # where KServe mounts the model at /mnt/models
    assert [port["containerPort"] for port in container["ports"]] == [8080]


def test_its_arguments_are_a_sluice_start_on_kserves_layout() -> None:
    [container] = runtime()["spec"]["containers"]
    parsed = build_parser().parse_args(container["args"])
    assert parsed.command == "start"
    assert parsed.foreground is True
    assert str(parsed.model_store) == "/mnt/models/model-store"
    assert str(parsed.ts_config) == "/mnt/models/config/config.properties"


def test_every_variable_is_a_setting_a_service_reads() -> None:
    [container] = runtime()["spec"]["containers"]
    settings = set().union(*(field_hints(cls) for cls in (CliSettings, GatewaySettings, ManagerSettings)))
    names = [item["name"] for item in container["env"]]
    assert all(name.startswith("SLUICE_") for name in names)
    assert [name for name in names if name.removeprefix("SLUICE_").lower() not in settings] == []
