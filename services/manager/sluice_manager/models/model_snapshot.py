"""TorchServe's ``model_snapshot`` key: the models a server loads at start, as TorchServe writes them
in a snapshot and as KServe's TorchServe ``config.properties`` lists them (KServe mounts
``/mnt/models/config/config.properties`` with one, beside ``/mnt/models/model-store``):

    {"name": "startup.cfg", "modelCount": 1, "models": {"mnist": {"1.0": {"defaultVersion": true,
     "marName": "mnist.mar", "minWorkers": 1, "maxWorkers": 5, "batchSize": 1, "maxBatchDelay": 10,
     "responseTimeout": 120}}}}

Each version's archive (``marName``, in the model store) is registered under the model's name, with
the rest of its entry as TorchServe's ``models`` key gives per-version settings; the version marked
``defaultVersion`` becomes the default. Used when ``load_models`` is empty, as TorchServe restores a
snapshot instead of loading ``load_models``.
"""

import json
from dataclasses import dataclass, field

from sluice_manager.models.load_models import StartupModelSpec
from sluice_manager.models.version_config import ModelsJson

_NOT_SETTINGS = ("marName", "defaultVersion")


@dataclass(frozen=True)
class ModelSnapshot:
    specs: list[StartupModelSpec] = field(default_factory=list)
    # Per-version settings, as the `models` key holds them.
    models_json: ModelsJson = field(default_factory=dict)
    # model -> the version marked defaultVersion.
    defaults: dict[str, str] = field(default_factory=dict)


def parse_model_snapshot(text: str) -> ModelSnapshot:
    """The snapshot's models; ValueError naming what is wrong with it."""
    if not text.strip():
        return ModelSnapshot()
    loaded = json.loads(text)
    models = loaded.get("models") if isinstance(loaded, dict) else None
    if not isinstance(models, dict):
        raise ValueError('model_snapshot must be a JSON object with "models": {name: {version: {...}}}')
    snapshot = ModelSnapshot()
    for name, versions in models.items():
        if not isinstance(versions, dict) or not all(isinstance(entry, dict) for entry in versions.values()):
            raise ValueError(f"model_snapshot: model {name!r} must map versions to objects")
        for version, entry in versions.items():
            archive = entry.get("marName")
            if not isinstance(archive, str) or not archive:
                raise ValueError(f"model_snapshot: {name} {version} has no marName")
            snapshot.specs.append(StartupModelSpec(url=archive, model_name=name))
            settings = {key: value for key, value in entry.items() if key not in _NOT_SETTINGS}
            snapshot.models_json.setdefault(name, {})[str(version)] = settings
            if entry.get("defaultVersion") is True:
                snapshot.defaults[name] = str(version)
    return snapshot


def merged_models_json(snapshot: ModelsJson, explicit: ModelsJson) -> ModelsJson:
    """The snapshot's per-version settings, with the ``models`` key's over them."""
    merged: ModelsJson = {
        name: {version: dict(conf) for version, conf in versions.items()}
        for name, versions in snapshot.items()
    }
    for name, versions in explicit.items():
        for version, conf in versions.items():
            merged.setdefault(name, {}).setdefault(version, {}).update(conf)
    return merged
