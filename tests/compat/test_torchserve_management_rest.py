"""TorchServe's REST management API replayed from its documentation (docs/management_api.md): the same
curl requests, plain HTTP, against a manager, a gateway and real workers as processes. Status codes,
JSON shapes and texts are TorchServe's (torchserve.md section 7.2-7.3). Imports no ``sluice.v1``."""

import json
from collections.abc import Iterator

import pytest
from openapi_spec_validator import validate

from tests.support.management_stack import HttpAnswer, Stack, http, start_stack
from tests.support.models import echo_model, write_mar
from tests.support.redis_server import RedisServer


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("mgmt-rest")
    server = RedisServer(root / "redis")
    server.start()
    result = start_stack(root, server.url)
    for name in ("noop", "squeezenet1_1", "json-body", "dup", "p-a", "p-b", "p-c", "p-d"):
        write_mar(echo_model(name), result.store)
    write_mar(echo_model("noop", "2.0"), result.root / "v2")
    (result.root / "v2" / "noop.mar").rename(result.store / "noop_2.mar")
    try:
        yield result
    finally:
        result.stop()
        server.kill()


def call(served: Stack, method: str, path: str, body: bytes | None = None, **headers: str) -> HttpAnswer:
    return http(
        method, served.manager.rest_url + path, body, {k.replace("_", "-"): v for k, v in headers.items()}
    )


def status_of(answer: HttpAnswer) -> tuple[int, str]:
    body = answer.json()
    assert list(body) == ["status"], body
    return answer.status, str(body["status"])


def error_of(answer: HttpAnswer) -> tuple[int, str, str]:
    body = answer.json()
    assert list(body) == ["code", "type", "message"], body
    assert body["code"] == answer.status
    assert answer.headers["connection"] == "close"
    return answer.status, body["type"], body["message"]


def test_register_asynchronously_then_synchronously(served: Stack) -> None:
    assert status_of(call(served, "POST", "/models?url=noop.mar")) == (
        200,
        'Model "noop" Version: 1.0 registered with 0 initial workers. Use scale workers API to add workers '
        "for the model.",
    )
    answer = call(served, "POST", "/models?initial_workers=1&synchronous=false&url=squeezenet1_1.mar")
    assert status_of(answer) == (202, "Processing worker updates...")
    assert answer.headers["content-type"] == "application/json"
    assert answer.body.endswith(b"}\n")
    assert b'\n  "status"' in answer.body
    for header in ("x-request-id", "pragma", "cache-control", "expires"):
        assert header in answer.headers
    call(served, "DELETE", "/models/squeezenet1_1")
    answer = call(served, "POST", "/models?initial_workers=1&synchronous=true&url=squeezenet1_1.mar")
    assert status_of(answer) == (200, 'Model "squeezenet1_1" Version: 1.0 registered with 1 initial workers')


def test_register_with_a_json_body(served: Stack) -> None:
    body = json.dumps({"url": "json-body.mar", "batch_size": 4, "max_batch_delay": 50}).encode()
    answer = call(served, "POST", "/models", body, content_type="application/json")
    assert answer.status == 200
    [entry] = call(served, "GET", "/models/json-body").json()
    assert (entry["batchSize"], entry["maxBatchDelay"], entry["minWorkers"]) == (4, 50, 0)


def test_register_errors(served: Stack) -> None:
    call(served, "POST", "/models?url=dup.mar")
    assert error_of(call(served, "POST", "/models?url=dup.mar")) == (
        409, "ConflictStatusException", "Model version 1.0 is already registered for model dup"
    )  # fmt: skip
    assert error_of(call(served, "POST", "/models")) == (
        400,
        "BadRequestException",
        "Parameter url is required.",
    )
    assert error_of(call(served, "POST", "/models?url=doesnotexist.mar")) == (
        404, "ModelNotFoundException", "Model not found at: doesnotexist.mar"
    )  # fmt: skip
    assert error_of(call(served, "POST", "/models?url=dup.mar&runtime=python4")) == (
        400, "BadRequestException", "Invalid RuntimeType value: python4"
    )  # fmt: skip


def test_scale_describe_and_versions(served: Stack) -> None:
    assert status_of(call(served, "PUT", "/models/noop?min_worker=1")) == (
        202,
        "Processing worker updates...",
    )
    assert status_of(call(served, "PUT", "/models/noop?min_worker=2&synchronous=true")) == (
        200, "Workers scaled to 2 for model: noop"
    )  # fmt: skip
    [entry] = call(served, "GET", "/models/noop").json()
    assert (entry["minWorkers"], entry["maxWorkers"]) == (2, 2)
    assert [w["status"] for w in entry["workers"]] == ["READY", "READY"]
    assert call(served, "GET", "/models/noop/").json()[0]["modelName"] == "noop"
    call(served, "POST", "/models?url=noop_2.mar&initial_workers=1")
    assert status_of(call(served, "PUT", "/models/noop/2.0?min_worker=1&synchronous=true")) == (
        200, "Workers scaled to 1 for model: noop, version: 2.0"
    )  # fmt: skip
    described = call(served, "GET", "/models/noop/all").json()
    assert [(e["modelVersion"], e["modelUrl"]) for e in described] == [
        ("1.0", "noop.mar"),
        ("2.0", "noop_2.mar"),
    ]
    [custom] = call(served, "GET", "/models/noop/2.0?customized=true").json()
    assert custom["customizedMetadata"] == {"description": "echo", "model": "noop"}
    assert error_of(call(served, "PUT", "/models/noop?min_worker=3&max_worker=1")) == (
        400, "BadRequestException", "max_worker cannot be less than min_worker."
    )  # fmt: skip
    # `timeout` (TorchServe ignores it): 0 stops the surplus worker at once. `number_gpu` is refused.
    assert status_of(call(served, "PUT", "/models/noop?min_worker=1&synchronous=true&timeout=0")) == (
        200, "Workers scaled to 1 for model: noop"
    )  # fmt: skip
    assert len(call(served, "GET", "/models/noop/1.0").json()[0]["workers"]) == 1
    status, kind, message = error_of(call(served, "PUT", "/models/noop?min_worker=1&number_gpu=1"))
    assert (status, kind) == (400, "BadRequestException")
    assert message.startswith("number_gpu is not supported: ")
    status, kind, message = error_of(call(served, "PUT", "/models/noop?min_worker=1&timeout=-3"))
    assert (status, kind, message.split(".")[0]) == (400, "BadRequestException", "Invalid timeout: -3")
    assert error_of(call(served, "DELETE", "/models/noop/1.0")) == (
        403, "InvalidModelVersionException", "Cannot remove default version for model noop"
    )  # fmt: skip
    assert status_of(call(served, "PUT", "/models/noop/2.0/set-default")) == (
        200, 'Default version successfully updated for model "noop" to "2.0"'
    )  # fmt: skip
    assert error_of(call(served, "PUT", "/models/noop/7.0/set-default")) == (
        404, "ModelVersionNotFoundException", "Model version 7.0 does not exist for model noop"
    )  # fmt: skip
    assert call(served, "GET", "/models/noop").json()[0]["modelVersion"] == "2.0"
    assert call(served, "GET", "/v1/models/noop").json() == {"name": "noop", "ready": True}
    assert status_of(call(served, "DELETE", "/models/noop/1.0")) == (200, 'Model "noop" unregistered')
    assert status_of(call(served, "DELETE", "/models/noop")) == (200, 'Model "noop" unregistered')
    assert error_of(call(served, "GET", "/models/noop")) == (
        404,
        "ModelNotFoundException",
        "Model not found: noop",
    )


def test_list_models_pages(served: Stack) -> None:
    for name in ("p-d", "p-b", "p-c", "p-a"):
        call(served, "POST", f"/models?url={name}.mar")
    names = [m["modelName"] for m in call(served, "GET", "/models").json()["models"]]
    assert names == sorted(names)
    start = names.index("p-a")
    assert call(served, "GET", f"/models?limit=2&next_page_token={start}").json() == {
        "nextPageToken": str(start + 2),
        "models": [{"modelName": "p-a", "modelUrl": "p-a.mar"}, {"modelName": "p-b", "modelUrl": "p-b.mar"}],
    }
    assert call(served, "GET", "/models?limit=0").json() == {"nextPageToken": "0", "models": []}
    assert call(served, "GET", f"/models?limit=2&next_page_token={len(names)}").json() == {"models": []}
    assert len(call(served, "GET", "/models?limit=abc").json()["models"]) == len(names)


def test_api_description_and_routing_errors(served: Stack) -> None:
    document = call(served, "OPTIONS", "/").json()
    validate(document)
    assert document["openapi"] == "3.0.1"
    assert call(served, "GET", "/api-description").json() == document
    assert error_of(call(served, "GET", "/nope")) == (
        404, "ResourceNotFoundException", "Requested resource is not found, please refer to API document."
    )  # fmt: skip
    assert error_of(call(served, "PATCH", "/models")) == (
        405, "MethodNotAllowedException", "Requested method is not allowed, please refer to API document."
    )  # fmt: skip
    assert error_of(call(served, "DELETE", "/models/nope/1.0")) == (
        404, "ModelNotFoundException", "Model not found: nope"
    )  # fmt: skip
