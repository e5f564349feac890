"""The Kubernetes example (docs/kubernetes/) names the job stream, consumer group and model version
exactly as Sluice does, so that KEDA reads the signal Sluice's own autoscaler reads."""

from pathlib import Path
from typing import Any

import yaml
from sluice.redis import keys

DOCS = Path(__file__).resolve().parents[3] / "docs" / "kubernetes"
MODEL, VERSION = "mnist", "1.0"


def load(name: str) -> dict[str, Any]:
    loaded = yaml.safe_load((DOCS / name).read_text())
    assert isinstance(loaded, dict)
    return loaded


def test_keda_reads_the_versions_stream_through_the_workers_group() -> None:
    scaled = load("keda-scaledobject.yaml")
    triggers = scaled["spec"]["triggers"]
    assert {trigger["type"] for trigger in triggers} == {"redis-streams"}
    for trigger in triggers:
        assert trigger["metadata"]["stream"] == keys.job_stream(MODEL, VERSION)
        assert trigger["metadata"]["consumerGroup"] == keys.JOB_GROUP
    assert any(t["metadata"].get("activationLagCount") == "0" for t in triggers), "a way up from zero"
    assert scaled["spec"]["minReplicaCount"] == 0


def test_the_deployment_is_the_one_keda_scales_and_serves_that_version() -> None:
    scaled, deployment = load("keda-scaledobject.yaml"), load("worker-deployment.yaml")
    assert scaled["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    assert args[:3] == ["python", "-m", "sluice_worker"]
    assert args[args.index("--model-name") + 1] == MODEL
    assert args[args.index("--model-version") + 1] == VERSION
    env = {item["name"] for item in container["env"]}
    assert {"SLUICE_REDIS_URL", "SLUICE_REDIS_PASSWORD"} <= env
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
