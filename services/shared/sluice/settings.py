"""The settings every service shares. Each service subclasses :class:`CommonSettings`, builds it once
in ``__main__`` and passes it down; nothing below reads ``os.environ``.

Precedence: explicit values > ``SLUICE_*`` environment > TorchServe ``config.properties`` > defaults.
Environment names are ``SLUICE_`` plus the field name, in any case.

The layering is a before-validator on a plain pydantic model rather than pydantic-settings: every
setting is a scalar, so the environment and config.properties only ever hand pydantic a string to
convert. pydantic-settings brought 31 modules (its cloud secret providers among them) and ~1.2 MiB
of resident memory to every service for that.
"""

import argparse
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal, Self

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from sluice.config_properties import properties_path, read_properties

ENV_PREFIX = "SLUICE_"


class CommonSettings(BaseModel):
    # Defaults are validated like given values; "model_" is a prefix of several settings' names.
    model_config = ConfigDict(extra="ignore", validate_default=True, protected_namespaces=())

    # TorchServe config.properties key -> field name; subclasses extend it.
    TS_KEYS: ClassVar[dict[str, str]] = {}

    redis_url: str = "redis://127.0.0.1:6379/0"
    log_format: Literal["console", "json"] = "console"
    log_level: str = "info"
    ts_config: Path | None = None

    @model_validator(mode="before")
    @classmethod
    def _layer_sources(cls, explicit: Any) -> Any:
        if not isinstance(explicit, dict):
            return explicit
        return layered_values(cls, explicit, os.environ)

    @classmethod
    def from_command_line(cls, argv: Sequence[str] | None, prog: str) -> Self:
        """Settings with ``--field-name value`` flags (one per field) as the explicit values.

        Like argparse with a bad flag, an invalid setting (from any source) prints the usage and one
        line naming it, and exits with status 2.
        """
        parser = argparse.ArgumentParser(
            prog=prog, description=f"Flags override {ENV_PREFIX}* variables and config.properties."
        )
        for name, field in cls.model_fields.items():
            flags = dict.fromkeys([f"--{name.replace('_', '-')}", f"--{name}"])
            if field.annotation is bool:
                parser.add_argument(*flags, dest=name, nargs="?", const="true", metavar="BOOL")
            else:
                parser.add_argument(*flags, dest=name, metavar=name.upper())
        given = {name: value for name, value in vars(parser.parse_args(argv)).items() if value is not None}
        try:
            return cls(**given)
        except ValidationError as exc:
            parser.error(describe_error(exc))


def layered_values(
    cls: type[CommonSettings], explicit: Mapping[str, Any], environ: Mapping[str, str]
) -> dict[str, Any]:
    """The raw values for ``cls``: ``explicit`` over the environment over config.properties.

    config.properties is the ``ts_config`` setting when one is given (explicitly or in the
    environment), else TorchServe's lookup (:func:`properties_path`).
    """
    prefixed = {key.lower(): value for key, value in environ.items() if key.upper().startswith(ENV_PREFIX)}
    from_env = {
        name: prefixed[key] for name in cls.model_fields if (key := f"{ENV_PREFIX}{name}".lower()) in prefixed
    }
    given = {**from_env, **explicit}
    chosen = given.get("ts_config")
    path = Path(chosen) if chosen else properties_path(environ)
    properties = read_properties(path) if path else {}
    from_file = {name: properties[key] for key, name in cls.TS_KEYS.items() if key in properties}
    return {**from_file, **given}


def describe_error(error: ValidationError) -> str:
    """One line naming the first invalid setting, for a service that refuses to start."""
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    # A check across settings (a model validator) has no location.
    return f"invalid setting {where}: {first['msg']}" if where else f"invalid settings: {first['msg']}"
