"""The management port's OpenAPI document is valid OpenAPI 3.0.1 and lists every route."""

from openapi_spec_validator import validate
from sluice_manager.api.rest_api.openapi import api_description


def test_document_is_valid_and_complete() -> None:
    document = api_description()
    assert document["openapi"] == "3.0.1"
    assert document["info"]["version"] == "0.12.0"
    validate(document)
    assert set(document["paths"]) == {
        "/", "/api-description", "/models", "/models/{model_name}", "/models/{model_name}/{model_version}",
        "/models/{model_name}/{model_version}/set-default", "/v1/models/{model_name}", "/token",
    }  # fmt: skip
    assert set(document["paths"]["/models/{model_name}"]) == {"get", "put", "delete"}
    # TorchServe's docs renew keys with GET; POST works too.
    assert set(document["paths"]["/token"]) == {"get", "post"}
