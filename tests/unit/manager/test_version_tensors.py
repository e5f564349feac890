"""Registration reads the KServe v2 declaration (model-config.yaml ``sluice:``) into the record."""

import pytest
from sluice.errors import ErrorCode, SluiceError
from sluice.kserve.declaration import ModelTensors, TensorSpec

from tests.unit.manager.test_version_config import record


def test_the_sluice_section_becomes_the_records_tensors() -> None:
    yaml = {
        "batchSize": 2,
        "sluice": {
            "max_batch_size": 4,
            "inputs": [{"name": "x", "datatype": "FP32", "shape": [3]}],
            "tensor_handler": True,
        },
    }
    got = record(yaml=yaml)
    assert got.tensors == ModelTensors(
        max_batch_size=4, inputs=(TensorSpec(name="x", datatype="FP32", shape=(3,)),), tensor_handler=True
    )
    assert got.model_yaml_config["sluice"]["max_batch_size"] == 4  # the handler still sees the whole yaml


def test_no_section_declares_nothing() -> None:
    assert record().tensors == ModelTensors()


def test_a_malformed_section_refuses_the_registration() -> None:
    with pytest.raises(SluiceError) as caught:
        record(yaml={"sluice": {"inputs": [{"name": "x", "datatype": "float", "shape": [1]}]}})
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    assert caught.value.message.startswith("model-config.yaml: sluice.inputs[0].datatype must be one of")
