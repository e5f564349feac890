"""The model-config.yaml `sluice:` section and the record field it fills."""

from typing import Any

import pytest
import yaml
from sluice.kserve.declaration import ModelTensors, TensorSpec, parse_model_tensors
from sluice.registry.records import VersionRecord

FULL = """
sluice:
  max_batch_size: 8
  inputs:
    - {name: INPUT0, datatype: FP32, shape: [16]}
    - {name: MASK, datatype: BOOL, shape: [-1], optional: true}
  outputs:
    - {name: OUTPUT0, datatype: FP32, shape: [16]}
  tensor_handler: true
  tensor_library: torch
  decoupled: true
  platform: pytorch_torchscript
batchSize: 4
"""


def test_full_section() -> None:
    tensors = parse_model_tensors(yaml.safe_load(FULL))
    assert tensors == ModelTensors(
        max_batch_size=8,
        inputs=(
            TensorSpec(name="INPUT0", datatype="FP32", shape=(16,)),
            TensorSpec(name="MASK", datatype="BOOL", shape=(-1,), optional=True),
        ),
        outputs=(TensorSpec(name="OUTPUT0", datatype="FP32", shape=(16,)),),
        tensor_handler=True,
        tensor_library="torch",
        decoupled=True,
        platform="pytorch_torchscript",
    )
    assert tensors.input("MASK") is not None
    assert tensors.output("nope") is None


def test_no_section_declares_nothing() -> None:
    assert parse_model_tensors({"batchSize": 2}) == ModelTensors()


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ("[]", "sluice must be a mapping"),
        ("{inptus: []}", "unknown key sluice.inptus"),
        ("{max_batch_size: -1}", "max_batch_size must be an integer >= 0"),
        ("{max_batch_size: true}", "max_batch_size must be an integer >= 0"),
        ("{tensor_library: jax}", "tensor_library must be numpy or torch"),
        ("{tensor_handler: 'yes'}", "tensor_handler must be true or false"),
        ("{inputs: {name: x}}", "sluice.inputs must be a list"),
        ("{inputs: [x]}", "sluice.inputs[0] must be a mapping"),
        ("{inputs: [{name: x, datatype: fp32, shape: [1]}]}", "sluice.inputs[0].datatype must be one of"),
        ("{inputs: [{name: x, datatype: FP32, shape: [-2]}]}", "sluice.inputs[0].shape must be a list"),
        ("{inputs: [{name: x, datatype: FP32, shape: 3}]}", "sluice.inputs[0].shape must be a list"),
        ("{inputs: [{datatype: FP32, shape: [1]}]}", "sluice.inputs[0].name must be a non-empty string"),
        ("{inputs: [{name: x, datatype: FP32, shape: [1], dims: [1]}]}", "unknown key sluice.inputs[0].dims"),
        ("{outputs: [{name: y, datatype: FP32, shape: [1], optional: true}]}", "outputs cannot be optional"),
        (
            "{inputs: [{name: x, datatype: FP32, shape: [1]}, {name: x, datatype: FP32, shape: [1]}]}",
            "names 'x' twice",
        ),
        ("{platform: 3}", "platform must be a string"),
    ],
)
def test_malformed_sections_are_refused(section: str, message: str) -> None:
    raw: Any = yaml.safe_load(f"sluice: {section}")
    with pytest.raises(ValueError, match=r"model-config\.yaml") as caught:
        parse_model_tensors(raw)
    assert message in str(caught.value)


def test_records_written_before_the_field_existed_still_parse() -> None:
    old = '{"model_name": "m", "version": "1", "model_url": "m.mar", "model_dir": "/x", "handler": "h"}'
    assert VersionRecord.from_json(old).tensors == ModelTensors()


def test_the_declaration_round_trips_through_the_record() -> None:
    tensors = parse_model_tensors(yaml.safe_load(FULL))
    record = VersionRecord(
        model_name="m", version="1", model_url="u", model_dir="/x", handler="h", tensors=tensors
    )
    assert VersionRecord.from_json(record.to_json()).tensors == tensors
