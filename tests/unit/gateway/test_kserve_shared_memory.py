"""The gateway's side of system shared memory: the shared_memory_* parameters read and checked, the
region registry behind its seam (an in-memory fake), a request's regions resolved to job spans, and
the REST forms."""

import json
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from sluice.errors import ErrorCode, SluiceError
from sluice.v1 import kserve_pb2 as pb
from sluice_gateway.kserve.grpc_codec import to_kserve_request
from sluice_gateway.kserve.rest_codec import infer_response_body, parse_infer_request, region_body
from sluice_gateway.kserve.shared_memory import SharedMemory
from sluice_gateway.kserve.validation import check_tensors

from tests.unit.gateway.fakes import InMemoryRegions

Input = pb.ModelInferRequest.InferInputTensor
Output = pb.ModelInferRequest.InferRequestedOutputTensor


def _shm(region: str, byte_size: int, offset: int | None = None) -> dict[str, pb.InferParameter]:
    parameters = {
        "shared_memory_region": pb.InferParameter(string_param=region),
        "shared_memory_byte_size": pb.InferParameter(int64_param=byte_size),
    }
    if offset is not None:
        parameters["shared_memory_offset"] = pb.InferParameter(int64_param=offset)
    return parameters


def _request(
    *inputs: Input, raw: Sequence[bytes] = (), outputs: Sequence[Output] = ()
) -> pb.ModelInferRequest:
    return pb.ModelInferRequest(model_name="m", inputs=inputs, raw_input_contents=raw, outputs=outputs)


def _invalid(message: pb.ModelInferRequest) -> str:
    with pytest.raises(SluiceError) as caught:
        check_tensors(to_kserve_request(message))
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    return caught.value.message


@pytest.fixture
def key() -> Iterator[str]:
    name = f"sluice-unit-{uuid.uuid4().hex[:10]}"
    path = Path("/dev/shm") / name
    path.write_bytes(bytes(256))
    try:
        yield f"/{name}"
    finally:
        path.unlink(missing_ok=True)


def test_inputs_in_shared_memory_take_no_raw_entry() -> None:
    shared = Input(name="a", datatype="FP32", shape=[2], parameters=_shm("r", 8))
    sent = Input(name="b", datatype="INT8", shape=[3])
    check_tensors(to_kserve_request(_request(shared, sent, raw=[b"abc"])))
    assert "does not match the expected number of raw" in _invalid(_request(shared, sent, raw=[b"abc", b"x"]))


def test_shared_memory_parameters_are_checked_as_triton_checks_them() -> None:
    def with_parameters(**parameters: pb.InferParameter) -> pb.ModelInferRequest:
        return _request(Input(name="a", datatype="FP32", shape=[2], parameters=parameters))

    assert "input byte size mismatch for input 'a'" in _invalid(with_parameters(**_shm("r", 4)))
    assert "expected string_param" in _invalid(
        with_parameters(
            shared_memory_region=pb.InferParameter(int64_param=1),
            shared_memory_byte_size=pb.InferParameter(int64_param=8),
        )
    )
    assert "'shared_memory_byte_size' must be specified" in _invalid(
        with_parameters(shared_memory_region=pb.InferParameter(string_param="r"))
    )
    assert "expected int64_param" in _invalid(
        with_parameters(**{**_shm("r", 8), "shared_memory_offset": pb.InferParameter(string_param="0")})
    )
    assert "expected a value >= 0" in _invalid(with_parameters(**_shm("r", 8, -1)))
    with_contents = Input(
        name="a",
        datatype="FP32",
        shape=[2],
        parameters=_shm("r", 8),
        contents=pb.InferTensorContents(fp32_contents=[1, 2]),
    )
    assert "contents field must not be specified when using shared memory" in _invalid(
        _request(with_contents)
    )


async def test_regions_resolve_to_absolute_spans_within_the_region(key: str) -> None:
    service = SharedMemory(InMemoryRegions(), enabled=True)
    await service.register("r", key, 16, 64)
    request = to_kserve_request(
        _request(
            Input(name="a", datatype="FP32", shape=[4], parameters=_shm("r", 16, 8)),
            outputs=[Output(name="y", parameters=_shm("r", 32, 24))],
        )
    )
    inputs, outputs = await service.spans(request)
    assert [(s.tensor, s.key, s.offset, s.byte_size) for s in inputs] == [("a", key, 24, 16)]
    assert [(s.tensor, s.offset, s.byte_size) for s in outputs] == [("y", 40, 32)]
    beyond = to_kserve_request(_request(outputs=[Output(name="y", parameters=_shm("r", 32, 40))]))
    with pytest.raises(SluiceError, match="Invalid offset \\+ byte size for shared memory region: 'r'"):
        await service.spans(beyond)


async def test_registry_calls_and_their_errors(key: str) -> None:
    store = InMemoryRegions()
    service = SharedMemory(store, enabled=True)
    await service.register("r", key, 0, 256)
    with pytest.raises(SluiceError) as twice:
        await service.register("r", key, 0, 8)
    assert twice.value.code is ErrorCode.CONFLICT
    with pytest.raises(SluiceError, match="invalid args"):
        await service.register("big", key, 0, 257)
    with pytest.raises(SluiceError, match="needs a name"):
        await service.register("", key, 0, 8)
    with pytest.raises(SluiceError) as unknown:
        await service.status("nope")
    assert unknown.value.code is ErrorCode.NOT_FOUND
    assert [r.name for r in await service.status("")] == ["r"]
    await service.unregister("nope")  # no error, as Triton
    await service.unregister("")
    assert await service.status("") == []
    store.down = True
    with pytest.raises(SluiceError) as down:
        await service.status("")
    assert down.value.code is ErrorCode.UNAVAILABLE


async def test_off_refuses_every_call_naming_the_setting(key: str) -> None:
    service = SharedMemory(InMemoryRegions(), enabled=False)
    request = to_kserve_request(
        _request(Input(name="a", datatype="FP32", shape=[2], parameters=_shm("r", 8)))
    )
    for call in (
        service.register("r", key, 0, 8),
        service.status(""),
        service.unregister(""),
        service.spans(request),
    ):
        with pytest.raises(SluiceError, match="sluice_system_shared_memory") as refused:
            await call
        assert refused.value.code is ErrorCode.NOT_IMPLEMENTED


def test_rest_inputs_in_shared_memory_carry_no_data_and_outputs_none_back() -> None:
    body = json.dumps(
        {
            "inputs": [
                {
                    "name": "a",
                    "datatype": "FP32",
                    "shape": [2],
                    "parameters": {"shared_memory_region": "r", "shared_memory_byte_size": 8},
                },
                {"name": "b", "datatype": "INT32", "shape": [1], "data": [7]},
            ],
            "outputs": [
                {"name": "y", "parameters": {"shared_memory_region": "o", "shared_memory_byte_size": 8}}
            ],
        }
    ).encode()
    parsed = parse_infer_request(body, None, "m", "")
    assert len(parsed.message.raw_input_contents) == 1
    request = to_kserve_request(parsed.message)
    assert request.inputs[0].shared_memory is not None
    assert request.outputs[0].shared_memory is not None
    response = pb.ModelInferResponse(model_name="m")
    response.outputs.add(name="y", datatype="FP32", shape=[2], parameters=_shm("o", 8))
    answered, _length = infer_response_body(response.SerializeToString(), parsed)
    [output] = json.loads(answered)["outputs"]
    assert "data" not in output
    assert output["parameters"]["shared_memory_region"] == "o"


def test_a_rest_input_in_shared_memory_takes_no_data_beside_it() -> None:
    region = {"shared_memory_region": "r", "shared_memory_byte_size": 4}
    for extra in ({"data": [1.0]}, {"parameters": {**region, "binary_data_size": 4}}):
        item = {"name": "a", "datatype": "FP32", "shape": [1], "parameters": region, **extra}
        with pytest.raises(SluiceError, match="takes no 'data' and no binary data"):
            parse_infer_request(json.dumps({"inputs": [item]}).encode(), None, "m", "")


def test_rest_register_bodies() -> None:
    assert region_body(b'{"key": "/k", "byte_size": 8}') == ("/k", 0, 8)
    assert region_body(b'{"key": "/k", "offset": 4, "byte_size": 8}') == ("/k", 4, 8)
    for bad in (b"[]", b'{"byte_size": 8}', b'{"key": "/k"}', b'{"key": "/k", "byte_size": -1}', b"{"):
        with pytest.raises(SluiceError):
            region_body(bad)
