"""The gateway's REST error bodies: KServe v2's ``{"error"}`` on /v2 paths, TorchServe's elsewhere."""

import json

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from sluice.errors import ErrorCode, SluiceError
from sluice_gateway.rest_api.errors import GatewayErrorBodies

BODIES = GatewayErrorBodies()


def body(response: web.StreamResponse) -> object:
    assert isinstance(response, web.Response)
    assert isinstance(response.body, bytes)
    return json.loads(response.body)


def test_domain_errors_by_path() -> None:
    error = SluiceError(ErrorCode.QUEUE_FULL, "full")
    kserve = BODIES.domain(make_mocked_request("POST", "/v2/models/m/infer"), error)
    assert (kserve.status, body(kserve)) == (503, {"error": "full"})
    torchserve = BODIES.domain(make_mocked_request("POST", "/v2x"), error)
    assert body(torchserve) == {"code": 503, "type": "ServiceUnavailableException", "message": "full"}


@pytest.mark.parametrize(
    ("exc", "message"),
    [
        (web.HTTPNotFound(), "Requested resource is not found, please refer to API document."),
        (
            web.HTTPMethodNotAllowed("GET", ["POST"]),
            "Requested method is not allowed, please refer to API document.",
        ),
        (web.HTTPRequestEntityTooLarge(max_size=1, actual_size=2), "Request body exceeds max_request_size."),
        (web.HTTPBadRequest(text="bad header"), "bad header"),
    ],
)
def test_routing_errors_on_kserve_paths(exc: web.HTTPException, message: str) -> None:
    response = BODIES.routing(make_mocked_request("GET", "/v2"), exc)
    assert (response.status, body(response)) == (exc.status, {"error": message})


def test_routing_errors_elsewhere_are_torchserve_s() -> None:
    too_large = BODIES.routing(
        make_mocked_request("POST", "/predictions/m"), web.HTTPRequestEntityTooLarge(1, 2)
    )
    assert isinstance(too_large, web.Response)
    assert (too_large.status, too_large.body) == (413, None)
    not_found = BODIES.routing(make_mocked_request("GET", "/nope"), web.HTTPNotFound())
    assert body(not_found) == {
        "code": 404,
        "type": "ResourceNotFoundException",
        "message": "Requested resource is not found, please refer to API document.",
    }
