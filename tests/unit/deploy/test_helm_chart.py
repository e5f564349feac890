"""The Helm chart (deploy/helm/sluice), rendered by Helm's own Go SDK (helm-python-sdk: `helm template`
without the binary) and every manifest checked against the Kubernetes 1.37 schemas offline
(kubernetes-validate, strict). KEDA's ScaledObject is a custom resource those schemas do not hold:
its fields are checked against what Sluice names (the job stream, the consumer group, the Deployment
it scales). The services' environment is parsed by their own settings classes, so a misspelt
variable fails here, not in a cluster."""

import json
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml
from helm_python.chart import Chart
from helm_python.errors import HelmError
from sluice.redis import keys
from sluice_gateway.settings import GatewaySettings
from sluice_manager.settings import ManagerSettings
from sluice_worker.settings import WorkerSettings

CHART = Path(__file__).resolve().parents[3] / "deploy" / "helm" / "sluice"
KUBERNETES = "1.37.0"
CUSTOM_KINDS = {"ScaledObject"}
MODELS: list[dict[str, Any]] = [
    {"name": "mnist", "version": "1.0", "archive": "mnist.mar", "minWorkers": 0, "maxWorkers": 3},
    {"name": "llm", "version": "2.1", "archive": "llm.mar", "maxWorkers": 2, "gpu": 1, "jobsPerWorker": 8},
]


def render(values: dict[str, Any]) -> list[dict[str, Any]]:
    chart = Chart.load(str(CHART))
    try:
        rendered = chart.render(values, name="demo", namespace="serving")
    finally:
        chart.close()
    documents = [
        document
        for name, text in rendered.items()
        if name.endswith(".yaml")
        for document in yaml.safe_load_all(text)
        if document
    ]
    return documents


def of_kind(documents: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for doc in documents if doc["kind"] == kind}


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    [only] = deployment["spec"]["template"]["spec"]["containers"]
    found: dict[str, Any] = only
    return found


def plain_env(item: dict[str, Any]) -> dict[str, str]:
    return {entry["name"]: entry["value"] for entry in item["env"] if "value" in entry}


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"models": MODELS},
        {
            "models": MODELS,
            "tls": {"enabled": True, "secretName": "sluice-tls"},
            "auth": {"enabled": False},
            "redis": {"enabled": False},
            "externalRedis": {"existingSecret": "my-redis", "address": "redis.data:6379"},
            "keda": {"enabled": False},
            "otel": {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel:4317"},
        },
    ],
    ids=["defaults", "models", "tls-external-redis-no-keda"],
)
def test_every_manifest_is_valid_kubernetes(values: dict[str, Any]) -> None:
    documents = render(values)
    assert documents
    for document in documents:
        if document["kind"] not in CUSTOM_KINDS:
            kubernetes_validate.validate(document, KUBERNETES, strict=True)


def test_each_model_version_has_a_worker_deployment_scaled_by_keda_on_its_stream() -> None:
    documents = render({"models": MODELS})
    deployments, scaled = of_kind(documents, "Deployment"), of_kind(documents, "ScaledObject")
    assert set(scaled) == {"demo-worker-mnist-1-0", "demo-worker-llm-2-1"}
    for model in MODELS:
        name = f"demo-worker-{model['name']}-{str(model['version']).replace('.', '-')}"
        worker = container(deployments[name])
        args = worker["args"]
        assert args[args.index("--model-name") + 1] == model["name"]
        assert args[args.index("--model-version") + 1] == model["version"]
        spec = scaled[name]["spec"]
        assert spec["scaleTargetRef"]["name"] == name
        assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (
            model.get("minWorkers", 1),
            model["maxWorkers"],
        )
        assert deployments[name]["spec"]["replicas"] == model.get("minWorkers", 1)
        env_names = {entry["name"] for entry in worker["env"]}
        for trigger in spec["triggers"]:
            assert trigger["type"] == "redis-streams"
            assert trigger["metadata"]["stream"] == keys.job_stream(model["name"], model["version"])
            assert trigger["metadata"]["consumerGroup"] == keys.JOB_GROUP
            assert trigger["metadata"]["address"] == "demo-redis:6379"
            assert trigger["metadata"]["passwordFromEnv"] in env_names
        assert spec["triggers"][0]["metadata"]["streamLength"] == str(model.get("jobsPerWorker", 1))
        assert any(t["metadata"].get("activationLagCount") == "0" for t in spec["triggers"]), (
            "a way up from zero"
        )
    llm = container(deployments["demo-worker-llm-2-1"])
    assert llm["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert plain_env(llm)["SLUICE_GPU_ID"] == "0"
    assert "SLUICE_GPU_ID" not in plain_env(container(deployments["demo-worker-mnist-1-0"]))


def test_the_manager_registers_the_declared_versions_with_their_worker_ranges() -> None:
    manager = container(of_kind(render({"models": MODELS}), "Deployment")["demo-manager"])
    env = plain_env(manager)
    assert env["SLUICE_LAUNCHER"] == "external"
    assert env["SLUICE_LOAD_MODELS"] == "mnist=mnist.mar,llm=llm.mar"
    assert json.loads(env["SLUICE_MODELS"]) == {
        "mnist": {"1.0": {"minWorkers": 0, "maxWorkers": 3}},
        "llm": {"2.1": {"minWorkers": 1, "maxWorkers": 2}},
    }
    assert env["SLUICE_ARTIFACT_URL"] == "http://demo-manager:7072"


def settings_of(cls: type, item: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    """``cls`` built from the container's plain environment (as the service would at start)."""
    for name, value in plain_env(item).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("SLUICE_REDIS_URL", "redis://:pw@demo-redis:6379/0")  # from the Secret
    return cls(model_name="m", model_version="1") if cls is WorkerSettings else cls()


def test_tls_mounts_the_secret_into_the_gateways_and_the_manager(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    documents = render({"models": MODELS, "tls": {"enabled": True, "secretName": "sluice-tls"}})
    deployments = of_kind(documents, "Deployment")
    for name, cls in (("demo-gateway", GatewaySettings), ("demo-manager", ManagerSettings)):
        pod = deployments[name]["spec"]["template"]["spec"]
        [volume] = [v for v in pod["volumes"] if v["name"] == "tls"]
        assert volume["secret"]["secretName"] == "sluice-tls"
        [mount] = [m for m in container(deployments[name])["volumeMounts"] if m["name"] == "tls"]
        assert mount["readOnly"] is True
        with monkeypatch.context() as patched:
            patched.chdir(tmp_path)
            settings = settings_of(cls, container(deployments[name]), patched)
        assert str(settings.certificate_file) == f"{mount['mountPath']}/tls.crt"
        assert str(settings.private_key_file) == f"{mount['mountPath']}/tls.key"
        assert settings.enable_grpc_ssl is True
    gateway = settings_of(GatewaySettings, container(deployments["demo-gateway"]), monkeypatch)
    assert gateway.inference_address.startswith("https://")
    # Workers reach Redis and the artifact endpoint inside the cluster: no certificate for them.
    worker = container(deployments["demo-worker-mnist-1-0"])
    assert all(m["name"] != "tls" for m in worker["volumeMounts"])


def test_the_services_environment_is_their_own_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    deployments = of_kind(render({"models": MODELS, "auth": {"enabled": False}}), "Deployment")
    manager = settings_of(ManagerSettings, container(deployments["demo-manager"]), monkeypatch)
    assert manager.token_auth_enabled is False
    assert str(manager.model_store) == "/models"
    gateway = settings_of(GatewaySettings, container(deployments["demo-gateway"]), monkeypatch)
    assert gateway.token_auth_enabled is False
    worker = settings_of(WorkerSettings, container(deployments["demo-worker-llm-2-1"]), monkeypatch)
    assert (worker.gpu_id, worker.model_cache_dir) == (0, "/var/cache/sluice")


def test_tls_without_a_secret_is_refused_by_name() -> None:
    with pytest.raises(HelmError, match=r"tls\.secretName is required"):
        render({"tls": {"enabled": True}})
