"""The OpenAPI 3.0.1 description of the inference port (``OPTIONS /``, ``GET /api-description``, and
``OPTIONS /predictions/{model}`` for one model), built from small helpers so every route is listed
once. ``info.version`` is the TorchServe API version Sluice implements, as TorchServe reports its own."""

from typing import Any

TORCHSERVE_API_VERSION = "0.12.0"

Json = dict[str, Any]

_ERROR = {
    "type": "object",
    "required": ["code", "type", "message"],
    "properties": {
        "code": {"type": "integer", "description": "HTTP status code."},
        "type": {"type": "string", "description": "Error type."},
        "message": {"type": "string", "description": "Error message."},
    },
}
_V2_ERROR = {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}}
_TENSOR = {
    "type": "object",
    "required": ["name", "shape", "datatype"],
    "properties": {
        "name": {"type": "string"},
        "shape": {"type": "array", "items": {"type": "integer", "format": "int64"}},
        "datatype": {"type": "string"},
        "parameters": {"type": "object", "additionalProperties": True},
        "data": {"type": "array", "items": {}},
    },
}


def _json(schema: Json) -> Json:
    return {"application/json": {"schema": schema}}


def _errors(*codes: int, kserve: bool = False) -> Json:
    schema = {"$ref": "#/components/schemas/" + ("V2Error" if kserve else "Error")}
    return {str(code): {"description": "Error.", "content": _json(schema)} for code in codes}


def _path_param(name: str, description: str) -> Json:
    return {
        "in": "path",
        "name": name,
        "required": True,
        "description": description,
        "schema": {"type": "string"},
    }


_MODEL = _path_param("model_name", "Name of the model.")
_VERSION = _path_param("model_version", "Version of the model.")
_PREDICT_BODY = {
    "description": "Input data, decoded by content type (JSON, text, multipart, form fields, bytes).",
    "required": False,
    "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}},
}


def _predict(summary: str, op_id: str, params: list[Json]) -> Json:
    return {
        "post": {
            "operationId": op_id,
            "summary": summary,
            "parameters": params,
            "requestBody": _PREDICT_BODY,
            "responses": {
                "200": {
                    "description": "The handler's output; chunked when the handler streams.",
                    "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}},
                },
                **_errors(400, 404, 500, 503, 507),
            },
        }
    }


def _get(summary: str, op_id: str, schema: Json, params: list[Json] | None = None, **extra: Json) -> Json:
    operation: Json = {
        "operationId": op_id,
        "summary": summary,
        "responses": {"200": {"description": "OK.", "content": _json(schema)}, **extra},
    }
    if params:
        operation["parameters"] = params
    return {"get": operation}


def _torchserve_paths(model: str | None) -> Json:
    paths: Json = {}
    for verb, explain in (("predictions", False), ("explanations", True)):
        what = "Explanations" if explain else "Predictions"
        paths[f"/{verb}/{{model_name}}"] = _predict(f"{what} of the default version.", verb, [_MODEL])
        paths[f"/{verb}/{{model_name}}/{{model_version}}"] = _predict(
            f"{what} of one version.", f"{verb}_version", [_MODEL, _VERSION]
        )
    if model is None:
        paths["/v1/models/{model_name}:predict"] = _predict(
            "KServe v1 predict.", "kserve_v1_predict", [_MODEL]
        )
        paths["/v1/models/{model_name}:explain"] = _predict(
            "KServe v1 explain.", "kserve_v1_explain", [_MODEL]
        )
    return paths


_GENERATE_REQUEST = {
    "type": "object",
    "description": "Keys naming model inputs are inputs, other keys (and 'parameters') parameters.",
    "properties": {
        "id": {"type": "string"},
        "text_input": {"type": "string"},
        "parameters": {"type": "object", "additionalProperties": True},
    },
    "additionalProperties": True,
}
_GENERATE_RESPONSE = {
    "type": "object",
    "description": "Outputs by name (one element as a scalar), after model_name and model_version.",
    "properties": {"model_name": {"type": "string"}, "model_version": {"type": "string"}},
    "additionalProperties": True,
}


def _generate(stream: bool, tag: str, params: list[Json]) -> Json:
    """Triton's generate extension: one JSON object, or server-sent events."""
    answer = (
        {"text/event-stream": {"schema": {"type": "string", "description": "data: <response JSON>"}}}
        if stream
        else _json(_GENERATE_RESPONSE)
    )
    return {
        "post": {
            "operationId": f"v2_generate{'_stream' if stream else ''}{tag}",
            "summary": "Generate (Triton's extension): "
            + ("server-sent events." if stream else "one answer."),
            "parameters": params,
            "requestBody": {"required": True, "content": _json(_GENERATE_REQUEST)},
            "responses": {
                "200": {"description": "OK.", "content": answer},
                **_errors(400, 404, 500, 503, kserve=True),
            },
        }
    }


def _kserve_paths() -> Json:
    model_params = [_MODEL]
    version_params = [_MODEL, _VERSION]
    metadata = {"type": "object", "properties": {"name": {"type": "string"}}, "additionalProperties": True}
    ready = {"type": "object", "properties": {"ready": {"type": "boolean"}}}
    infer_request = {
        "type": "object",
        "required": ["inputs"],
        "properties": {
            "id": {"type": "string"},
            "parameters": {"type": "object", "additionalProperties": True},
            "inputs": {"type": "array", "items": {"$ref": "#/components/schemas/Tensor"}},
            "outputs": {"type": "array", "items": {"type": "object", "additionalProperties": True}},
        },
    }
    infer_response = {
        "type": "object",
        "properties": {
            "model_name": {"type": "string"},
            "model_version": {"type": "string"},
            "id": {"type": "string"},
            "outputs": {"type": "array", "items": {"$ref": "#/components/schemas/Tensor"}},
        },
    }
    paths: Json = {
        "/v2": _get("Server metadata.", "v2_server_metadata", metadata),
        "/v2/health/live": _get(
            "Server liveness.", "v2_live", {"type": "object", "properties": {"live": {"type": "boolean"}}}
        ),
        "/v2/health/ready": _get("Server readiness.", "v2_ready", ready),
    }
    for suffix, params, tag in (
        ("", model_params, ""),
        ("/versions/{model_version}", version_params, "_version"),
    ):
        base = f"/v2/models/{{model_name}}{suffix}"
        paths[base] = _get(
            "Model metadata.", f"v2_model_metadata{tag}", metadata, params, **_errors(404, kserve=True)
        )
        paths[f"{base}/ready"] = _get(
            "Model readiness.", f"v2_model_ready{tag}", ready, params, **_errors(404, kserve=True)
        )
        paths[f"{base}/infer"] = {
            "post": {
                "operationId": f"v2_infer{tag}",
                "summary": "Inference (JSON tensors, or the binary tensor data extension).",
                "parameters": params,
                "requestBody": {
                    "required": True,
                    "content": {
                        **_json(infer_request),
                        "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
                    },
                },
                "responses": {
                    "200": {"description": "OK.", "content": _json(infer_response)},
                    **_errors(400, 404, 500, 503, kserve=True),
                },
            }
        }
        paths[f"{base}/generate"] = _generate(False, tag, params)
        paths[f"{base}/generate_stream"] = _generate(True, tag, params)
    return paths


def api_description(model: str | None = None) -> Json:
    """The document for the whole inference API, or (``model`` set) for one model's predictions."""
    paths: Json = (
        {}
        if model is not None
        else {
            "/": {
                "options": {
                    "operationId": "apiDescription",
                    "summary": "This document.",
                    "responses": {
                        "200": {
                            "description": "OpenAPI 3.0.1 document.",
                            "content": _json({"type": "object"}),
                        }
                    },
                }
            },
            "/api-description": _get("This document.", "apiDescriptionGet", {"type": "object"}),
            "/ping": _get(
                "Health: 200 Healthy, 500 Unhealthy.",
                "ping",
                {"type": "object", "properties": {"status": {"type": "string"}}},
                **_errors(500),
            ),
        }
    )
    paths.update(_torchserve_paths(model))
    if model is None:
        paths.update(_kserve_paths())
    title = "Sluice inference API (TorchServe and KServe v2 compatible)"
    return {
        "openapi": "3.0.1",
        "info": {"title": title if model is None else f"{title}: {model}", "version": TORCHSERVE_API_VERSION},
        "paths": paths,
        "components": {"schemas": {"Error": _ERROR, "V2Error": _V2_ERROR, "Tensor": _TENSOR}},
    }
