"""How a model declares its KServe v2 tensors: the ``sluice:`` section of model-config.yaml.

.. code-block:: yaml

    sluice:
      max_batch_size: 8          # > 0: dim 0 of every input and output is a batch dim (not in `shape`)
      inputs:
        - {name: INPUT0, datatype: FP32, shape: [16]}      # -1 = variable dimension
        - {name: MASK, datatype: BOOL, shape: [-1], optional: true}
      outputs:
        - {name: OUTPUT0, datatype: FP32, shape: [16]}
      tensor_handler: false      # true: rows are {name: array}, results {name: array} (no JSON)
      tensor_library: numpy      # numpy arrays or torch tensors (tensor_handler only)
      decoupled: false           # 0..N responses per request, streaming rpcs only
      platform: ""               # informational (ModelMetadata / ModelConfig)

The manager parses it at registration (:func:`parse_model_tensors`) into
:attr:`sluice.registry.records.VersionRecord.tensors`; ModelMetadata, ModelConfig and the gateway's request
validation read it. A model that declares no tensors accepts any well-formed tensors.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from sluice.kserve.datatypes import DATATYPES
from sluice.typed import Checked

SECTION = "sluice"
_SECTION_KEYS = {
    "max_batch_size",
    "inputs",
    "outputs",
    "tensor_handler",
    "tensor_library",
    "decoupled",
    "platform",
}
_TENSOR_KEYS = {"name", "datatype", "shape", "optional"}
TensorLibrary = Literal["numpy", "torch"]


@dataclass(frozen=True, kw_only=True)
class TensorSpec(Checked):
    name: str
    datatype: str
    # Without the batch dimension when max_batch_size > 0; -1 = variable.
    shape: tuple[int, ...]
    # Inputs only: the request may leave it out.
    optional: bool = False


@dataclass(frozen=True, kw_only=True)
class ModelTensors(Checked):
    """A model version's v2 declaration; the defaults mean "nothing declared"."""

    inputs: tuple[TensorSpec, ...] = ()
    outputs: tuple[TensorSpec, ...] = ()
    max_batch_size: int = 0
    tensor_handler: bool = False
    tensor_library: TensorLibrary = "numpy"
    decoupled: bool = False
    platform: str = ""

    def input(self, name: str) -> TensorSpec | None:
        return next((spec for spec in self.inputs if spec.name == name), None)

    def output(self, name: str) -> TensorSpec | None:
        return next((spec for spec in self.outputs if spec.name == name), None)


def parse_model_tensors(model_yaml: Mapping[str, Any]) -> ModelTensors:
    """The ``sluice:`` section of a parsed model-config.yaml; ValueError (client-safe text) if malformed."""
    section = model_yaml.get(SECTION)
    if section is None:
        return ModelTensors()
    if not isinstance(section, Mapping):
        raise ValueError(f"model-config.yaml: {SECTION} must be a mapping")
    unknown = sorted(set(section) - _SECTION_KEYS)
    if unknown:
        raise ValueError(f"model-config.yaml: unknown key {SECTION}.{unknown[0]}")
    max_batch_size = section.get("max_batch_size", 0)
    if isinstance(max_batch_size, bool) or not isinstance(max_batch_size, int) or max_batch_size < 0:
        raise ValueError(f"model-config.yaml: {SECTION}.max_batch_size must be an integer >= 0")
    library = section.get("tensor_library", "numpy")
    if library not in ("numpy", "torch"):
        raise ValueError(f"model-config.yaml: {SECTION}.tensor_library must be numpy or torch")
    platform = section.get("platform", "")
    if not isinstance(platform, str):
        raise ValueError(f"model-config.yaml: {SECTION}.platform must be a string")
    return ModelTensors(
        inputs=_tensors(section, "inputs"),
        outputs=_tensors(section, "outputs"),
        max_batch_size=max_batch_size,
        tensor_handler=_flag(section, "tensor_handler"),
        tensor_library=library,
        decoupled=_flag(section, "decoupled"),
        platform=platform,
    )


def _flag(section: Mapping[str, Any], key: str) -> bool:
    value = section.get(key, False)
    if not isinstance(value, bool):
        raise ValueError(f"model-config.yaml: {SECTION}.{key} must be true or false")
    return value


def _tensors(section: Mapping[str, Any], key: str) -> tuple[TensorSpec, ...]:
    raw = section.get(key, [])
    if not isinstance(raw, list):
        raise ValueError(f"model-config.yaml: {SECTION}.{key} must be a list")
    specs = tuple(_tensor(item, f"{SECTION}.{key}[{index}]") for index, item in enumerate(raw))
    names = [spec.name for spec in specs]
    duplicate = next((name for name in names if names.count(name) > 1), None)
    if duplicate is not None:
        raise ValueError(f"model-config.yaml: {SECTION}.{key} names '{duplicate}' twice")
    if key == "outputs" and any(spec.optional for spec in specs):
        raise ValueError(f"model-config.yaml: {SECTION}.outputs cannot be optional")
    return specs


def _tensor(item: Any, where: str) -> TensorSpec:
    if not isinstance(item, Mapping):
        raise ValueError(f"model-config.yaml: {where} must be a mapping with name, datatype and shape")
    unknown = sorted(set(item) - _TENSOR_KEYS)
    if unknown:
        raise ValueError(f"model-config.yaml: unknown key {where}.{unknown[0]}")
    name, datatype, shape = item.get("name"), item.get("datatype"), item.get("shape")
    if not isinstance(name, str) or not name:
        raise ValueError(f"model-config.yaml: {where}.name must be a non-empty string")
    if datatype not in DATATYPES:
        raise ValueError(
            f"model-config.yaml: {where}.datatype must be one of {', '.join(DATATYPES)} (got {datatype!r})"
        )
    if not isinstance(shape, list) or not all(
        isinstance(dim, int) and not isinstance(dim, bool) and dim >= -1 for dim in shape
    ):
        raise ValueError(f"model-config.yaml: {where}.shape must be a list of integers >= -1")
    optional = item.get("optional", False)
    if not isinstance(optional, bool):
        raise ValueError(f"model-config.yaml: {where}.optional must be true or false")
    return TensorSpec(name=name, datatype=datatype, shape=tuple(shape), optional=optional)
