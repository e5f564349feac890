"""BYTES over KServe v2 REST in the gateway: JSON strings are their UTF-8 bytes, anything else in a
BYTES ``data`` list is refused, and an output element JSON cannot hold (not UTF-8) is answered as
binary tensor data, so no byte is lost or replaced."""

import json
import struct

import pytest
from sluice.errors import ErrorCode, SluiceError
from sluice.v1 import kserve_pb2 as pb
from sluice_gateway.kserve.rest_codec import RestInferRequest, infer_response_body, parse_infer_request
from sluice_gateway.kserve.rest_tensors import json_data, pack

ELEMENTS = [b"hello", "wörld".encode(), b"\xff\x00\x80"]


def framed(elements: list[bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(e)) + e for e in elements)


def test_json_strings_are_sent_as_their_utf8_bytes() -> None:
    body = {"inputs": [{"name": "s", "datatype": "BYTES", "shape": [2], "data": ["hello", "wörld"]}]}
    request = parse_infer_request(json.dumps(body).encode(), None, "m", "")
    assert request.message.raw_input_contents[0] == framed(ELEMENTS[:2])


@pytest.mark.parametrize("element", [5, True, None, 1.5, {"b64": "/wCA"}, "\ud800"])
def test_bytes_data_that_are_not_strings_are_refused(element: object) -> None:
    with pytest.raises(SluiceError) as caught:
        pack("BYTES", ["ok", element], "s")
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    assert caught.value.message.startswith("unable to parse 'data' of input 's' as BYTES")


def test_json_data_has_no_form_for_bytes_that_are_not_utf8() -> None:
    assert json_data("BYTES", framed(ELEMENTS[:2])) == ["hello", "wörld"]
    assert json_data("BYTES", framed(ELEMENTS)) is None


def _response(*, typed: bool) -> bytes:
    response = pb.ModelInferResponse(model_name="m", model_version="1")
    for name, elements in (("text", ELEMENTS[:2]), ("blob", ELEMENTS)):
        output = response.outputs.add(name=name, datatype="BYTES", shape=[len(elements)])
        if typed:
            output.contents.bytes_contents.extend(elements)
        else:
            response.raw_output_contents.append(framed(elements))
    return response.SerializeToString()


@pytest.mark.parametrize("typed", [False, True])
def test_an_output_json_cannot_hold_is_answered_as_binary_data(typed: bool) -> None:
    asked_json = RestInferRequest(pb.ModelInferRequest(), frozenset(), binary_all=False)
    body, length = infer_response_body(_response(typed=typed), asked_json)
    assert length is not None
    text, blob = json.loads(body[:length])["outputs"]
    assert text == {"name": "text", "datatype": "BYTES", "shape": [2], "data": ["hello", "wörld"]}
    assert blob == {"name": "blob", "datatype": "BYTES", "shape": [3], "parameters": {"binary_data_size": 26}}
    assert body[length:] == framed(ELEMENTS)


@pytest.mark.parametrize("typed", [False, True])
def test_binary_outputs_keep_every_byte(typed: bool) -> None:
    asked_binary = RestInferRequest(pb.ModelInferRequest(), frozenset(), binary_all=True)
    body, length = infer_response_body(_response(typed=typed), asked_binary)
    assert length is not None
    assert body[length:] == framed(ELEMENTS[:2]) + framed(ELEMENTS)
