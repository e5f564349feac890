"""The OpenAPI 3.0.1 description of the management API (``OPTIONS /``, ``GET /api-description``),
built from small helpers so that each route is described once. ``info.version`` is the TorchServe
API version Sluice implements."""

from typing import Any

TORCHSERVE_API_VERSION = "0.12.0"

Json = dict[str, Any]

_STATUS = {
    "type": "object",
    "required": ["status"],
    "properties": {"status": {"type": "string", "description": "What happened."}},
}
_ERROR = {
    "type": "object",
    "required": ["code", "type", "message"],
    "properties": {
        "code": {"type": "integer", "description": "HTTP status code."},
        "type": {"type": "string", "description": "Error type (TorchServe's exception name)."},
        "message": {"type": "string", "description": "Error message."},
    },
}
_WORKER = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "startTime": {"type": "string"},
        "status": {"type": "string", "enum": ["READY", "UNLOADING"]},
        "memoryUsage": {"type": "integer", "format": "int64"},
        "pid": {"type": "integer"},
        "gpu": {"type": "boolean"},
        "gpuUsage": {"type": "string"},
        "host": {"type": "string", "description": "Container workers: the engine's host."},
        "container": {"type": "string", "description": "Container workers: the container's short id."},
    },
}
_INT_FIELDS = (
    "minWorkers", "maxWorkers", "batchSize", "maxBatchDelay", "responseTimeout", "startupTimeout",
    "maxRetryTimeoutInSec", "clientTimeoutInMills", "parallelLevel", "sequenceMaxIdleMSec",
    "sequenceTimeoutMSec", "maxNumSequence", "maxSequenceJobQueueSize",
)  # fmt: skip
_DESCRIPTION = {
    "type": "object",
    "properties": {
        **{name: {"type": "string"} for name in ("modelName", "modelVersion", "modelUrl", "runtime")},
        **{name: {"type": "integer"} for name in _INT_FIELDS},
        "parallelType": {"type": "string"},
        "deviceType": {"type": "string"},
        **{
            name: {"type": "boolean"}
            for name in ("continuousBatching", "useJobTicket", "useVenv", "stateful")
        },
        "loadedAtStartup": {"type": "boolean"},
        "workers": {"type": "array", "items": _WORKER},
        "jobQueueStatus": {
            "type": "object",
            "properties": {"remainingCapacity": {"type": "integer"}, "pendingRequests": {"type": "integer"}},
        },
        "autoscaling": {
            "type": "object",
            "description": "Sluice: the workers wanted between minWorkers and maxWorkers, and the settings.",
            "properties": {
                "desiredWorkers": {"type": "integer"},
                "targetUtilization": {"type": "number"},
                "targetJobsPerWorker": {"type": "number"},
                **{
                    name: {"type": "integer"}
                    for name in ("scaleUpAfterMSec", "scaleDownAfterMSec", "scaleCooldownMSec")
                },
            },
        },
        "customizedMetadata": {"type": "object", "additionalProperties": True},
    },
}
_LIST = {
    "type": "object",
    "required": ["models"],
    "properties": {
        "nextPageToken": {"type": "string", "description": "Offset of the next page, when one may follow."},
        "models": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"modelName": {"type": "string"}, "modelUrl": {"type": "string"}},
            },
        },
    },
}

# {"<type>": {"key", "expiration time"}}: the renewed key, in the key file's shape.
_RENEWED_KEY = {
    "type": "object",
    "additionalProperties": {
        "type": "object",
        "properties": {"key": {"type": "string"}, "expiration time": {"type": "string"}},
    },
}


def _ref(name: str) -> Json:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: Json) -> Json:
    return {"application/json": {"schema": schema}}


def _answers(ok: dict[str, tuple[str, Json]], *errors: int) -> Json:
    responses = {code: {"description": text, "content": _json(schema)} for code, (text, schema) in ok.items()}
    for code in errors:
        responses[str(code)] = {"description": "Error.", "content": _json(_ref("Error"))}
    return responses


def _param(name: str, where: str, schema: Json, description: str, required: bool = False) -> Json:
    return {"in": where, "name": name, "required": required, "description": description, "schema": schema}


_INT = {"type": "integer"}
_BOOL = {"type": "boolean"}
_STR = {"type": "string"}
_MODEL = _param("model_name", "path", _STR, "Name of the model.", required=True)
_VERSION = _param("model_version", "path", _STR, "Version of the model.", required=True)
_STATUS_OK = {"200": ("Done.", _ref("Status"))}
_REGISTER_PARAMS = [
    _param("url", "query", _STR, "Archive name in the model store, or an http(s) URL.", required=True),
    _param("model_name", "query", _STR, "Name to register under (default: the archive's)."),
    _param("handler", "query", _STR, "Handler overriding the archive's."),
    _param("runtime", "query", _STR, "python or python3."),
    _param("batch_size", "query", _INT, "Inference batch size."),
    _param("max_batch_delay", "query", _INT, "Maximum batching delay in ms."),
    _param("initial_workers", "query", _INT, "Workers to start (default: default_workers_per_model)."),
    _param("synchronous", "query", _BOOL, "Wait until the workers are READY (default true)."),
    _param("response_timeout", "query", _INT, "Seconds a worker may take per batch."),
    _param("startup_timeout", "query", _INT, "Seconds a worker may take to load."),
]
_SCALE_PARAMS = [
    _param("min_worker", "query", _INT, "Minimum workers (default 1)."),
    _param("max_worker", "query", _INT, "Maximum workers (default min_worker)."),
    _param("synchronous", "query", _BOOL, "Wait until the workers are READY (default false)."),
    _param(
        "timeout",
        "query",
        _INT,
        "Seconds the workers it stops may take to drain before they are killed (0: at once; -1: default).",
    ),
    _param("number_gpu", "query", _INT, "Only 0: each worker uses one GPU when its host has any."),
]


def _model_ops(params: list[Json], label: str) -> Json:
    return {
        "get": {
            "operationId": f"describeModel{label}",
            "summary": "Describe the model's version(s): settings, workers, queue.",
            "parameters": [*params, _param("customized", "query", _BOOL, "Add the handler's metadata.")],
            "responses": _answers(
                {"200": ("Descriptions.", {"type": "array", "items": _ref("Description")})}, 404, 503
            ),
        },
        "put": {
            "operationId": f"scaleWorker{label}",
            "summary": "Set the version's worker range.",
            "parameters": [*params, *_SCALE_PARAMS],
            "responses": _answers(
                {
                    "200": ("Scaled.", _ref("Status")),
                    "202": ("Accepted.", _ref("Status")),
                    "206": ("Still scaling.", _ref("Status")),
                },
                400,
                404,
                409,
                500,
            ),
        },
        "delete": {
            "operationId": f"unregisterModel{label}",
            "summary": "Unregister the version (the default one when none is named).",
            "parameters": params,
            "responses": _answers(_STATUS_OK, 403, 404, 405, 408, 409),
        },
    }


def _renew_key(method: str) -> Json:
    return {
        "operationId": f"renewKey{method}",
        "summary": "Renew the management or inference key (served while token authorization is on).",
        "description": "Needs the API key: `Authorization: Bearer <API key>`. GET and POST do the same.",
        "parameters": [
            _param(
                "type",
                "query",
                {"type": "string", "enum": ["management", "inference"]},
                "Key to renew.",
                True,
            )
        ],
        "responses": _answers({"200": ("The new key.", _ref("RenewedKey"))}, 400),
    }


def api_description() -> Json:
    return {
        "openapi": "3.0.1",
        "info": {
            "title": "TorchServe APIs",
            "description": "Sluice's implementation of the TorchServe management API.",
            "version": TORCHSERVE_API_VERSION,
        },
        "paths": {
            "/": {
                "options": {
                    "operationId": "apiDescription",
                    "summary": "This document.",
                    "responses": {"200": {"description": "OpenAPI 3.0.1 JSON."}},
                }
            },
            "/api-description": {
                "get": {
                    "operationId": "getApiDescription",
                    "summary": "This document.",
                    "responses": {"200": {"description": "OpenAPI 3.0.1 JSON."}},
                }
            },
            "/models": {
                "get": {
                    "operationId": "listModels",
                    "summary": "List registered models (their default versions), by name.",
                    "parameters": [
                        _param("limit", "query", _INT, "Page size, 0 to 100 (default 100)."),
                        _param("next_page_token", "query", _INT, "Offset from a previous page."),
                    ],
                    "responses": _answers({"200": ("A page of models.", _ref("ModelList"))}),
                },
                "post": {
                    "operationId": "registerModel",
                    "summary": "Register a model archive (query parameters, or the same keys as JSON).",
                    "parameters": _REGISTER_PARAMS,
                    "responses": _answers(
                        {"200": ("Registered.", _ref("Status")), "202": ("Accepted.", _ref("Status"))},
                        400,
                        404,
                        405,
                        409,
                        500,
                    ),
                },
            },
            "/models/{model_name}": _model_ops([_MODEL], ""),
            "/models/{model_name}/{model_version}": _model_ops([_MODEL, _VERSION], "Version"),
            "/models/{model_name}/{model_version}/set-default": {
                "put": {
                    "operationId": "setDefault",
                    "summary": "Make this version the model's default.",
                    "parameters": [_MODEL, _VERSION],
                    "responses": _answers(_STATUS_OK, 404, 409),
                }
            },
            "/token": {"get": _renew_key("Get"), "post": _renew_key("Post")},
            "/v1/models/{model_name}": {
                "get": {
                    "operationId": "kserveV1ModelReady",
                    "summary": "KServe v1 readiness of the model's default version.",
                    "parameters": [_MODEL],
                    "responses": _answers(
                        {
                            "200": (
                                "Readiness.",
                                {"type": "object", "properties": {"name": _STR, "ready": _BOOL}},
                            )
                        },
                        404,
                    ),
                }
            },
        },
        "components": {
            "schemas": {
                "Status": _STATUS,
                "Error": _ERROR,
                "ModelList": _LIST,
                "Description": _DESCRIPTION,
                "RenewedKey": _RENEWED_KEY,
            }
        },
    }
