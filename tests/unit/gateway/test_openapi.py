"""The inference port's OpenAPI documents are valid OpenAPI 3.0.1 and list every route."""

from openapi_spec_validator import validate
from sluice_gateway.torchserve.openapi import api_description


def test_whole_api_document_is_valid() -> None:
    document = api_description()
    assert document["openapi"] == "3.0.1"
    validate(document)
    for path in (
        "/ping",
        "/api-description",
        "/predictions/{model_name}",
        "/predictions/{model_name}/{model_version}",
        "/explanations/{model_name}",
        "/v1/models/{model_name}:predict",
        "/v2/health/ready",
        "/v2/models/{model_name}/versions/{model_version}/infer",
        "/v2/models/{model_name}/generate",
        "/v2/models/{model_name}/generate_stream",
        "/v2/models/{model_name}/versions/{model_version}/generate",
        "/v2/models/{model_name}/versions/{model_version}/generate_stream",
    ):
        assert path in document["paths"], path


def test_model_document_is_valid() -> None:
    document = api_description("echo")
    validate(document)
    assert set(document["paths"]) == {
        "/predictions/{model_name}",
        "/predictions/{model_name}/{model_version}",
        "/explanations/{model_name}",
        "/explanations/{model_name}/{model_version}",
    }
