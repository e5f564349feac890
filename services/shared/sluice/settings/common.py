"""The settings every service shares. Each service subclasses :class:`CommonSettings`, builds it once
in ``__main__`` and passes it down; nothing below reads ``os.environ``.

Precedence: explicit values > ``SLUICE_*`` environment > TorchServe ``config.properties`` > defaults.
Environment names are ``SLUICE_`` plus the field name, in any case.

Settings are dataclasses checked by :mod:`sluice.typed` (every setting is a scalar, so the
environment and config.properties only ever hand it a string to convert). Subclasses are declared
with ``@dataclass(init=False, kw_only=True)`` and keep this ``__init__``, which layers the sources;
:meth:`CommonSettings.check` is the hook for rules across settings.
"""

import argparse
import os
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Self, Union, get_args, get_origin

from sluice.redis.target import effective_url, is_cluster
from sluice.settings.config_properties import properties_path, read_properties
from sluice.typed import InvalidValue, field_hints, field_values

ENV_PREFIX = "SLUICE_"


@dataclass(init=False, kw_only=True)
class CommonSettings:
    # TorchServe config.properties key -> field name; subclasses extend it.
    TS_KEYS: ClassVar[dict[str, str]] = {
        "sluice_redis_url": "redis_url",
        "sluice_redis_sentinels": "redis_sentinels",
        "sluice_redis_sentinel_master": "redis_sentinel_master",
        "sluice_redis_password": "redis_password",
        "sluice_redis_sentinel_password": "redis_sentinel_password",
        "sluice_redis_cluster": "redis_cluster",
    }

    # The Redis to use. Once built, the one the other redis_* settings mean (sluice.redis.target):
    # with Sentinels listed, a redis+sentinel:// URL of their master; with a Cluster's nodes, a
    # redis+cluster:// URL.
    redis_url: str = "redis://127.0.0.1:6379/0"
    # Redis Sentinels (host:port,host:port...) and the name of the master they watch.
    redis_sentinels: str = ""
    redis_sentinel_master: str = ""
    redis_password: str = ""
    redis_sentinel_password: str = ""
    # Seed nodes of a Redis Cluster (host:port,host:port...).
    redis_cluster: str = ""
    log_format: Literal["console", "json"] = "console"
    log_level: str = "info"
    ts_config: Path | None = None

    def __init__(self, **explicit: Any) -> None:
        """Explicit values over the environment over config.properties over the defaults, each
        converted and checked (:class:`InvalidValue` names the first bad one)."""
        cls = type(self)
        if "__dataclass_fields__" not in vars(cls):
            raise TypeError(f"{cls.__name__} must be declared with @dataclass(init=False, kw_only=True)")
        for name, value in field_values(cls, layered_values(cls, explicit, os.environ)).items():
            setattr(self, name, value)
        try:
            self.redis_url = effective_url(
                self.redis_url,
                sentinels=self.redis_sentinels,
                master=self.redis_sentinel_master,
                password=self.redis_password,
                sentinel_password=self.redis_sentinel_password,
                cluster=self.redis_cluster,
            )
        except ValueError as exc:
            raise InvalidValue(
                "redis_cluster" if self.redis_cluster else "redis_sentinels", str(exc)
            ) from None
        self.check()

    def check(self) -> None:
        """Raise :class:`InvalidValue` when the settings do not fit together."""

    @property
    def on_redis_cluster(self) -> bool:
        """Whether the Redis is a Cluster (``sluice_redis_cluster``)."""
        return is_cluster(self.redis_url)

    @classmethod
    def from_command_line(cls, argv: Sequence[str] | None, prog: str) -> Self:
        """Settings with ``--field-name value`` flags (one per field) as the explicit values.

        Like argparse with a bad flag, an invalid setting (from any source) prints the usage and one
        line naming it, and exits with status 2.
        """
        parser = argparse.ArgumentParser(
            prog=prog, description=f"Flags override {ENV_PREFIX}* variables and config.properties."
        )
        for name, hint in field_hints(cls).items():
            flags = dict.fromkeys([f"--{name.replace('_', '-')}", f"--{name}"])
            if _is_bool(hint):
                parser.add_argument(*flags, dest=name, nargs="?", const="true", metavar="BOOL")
            else:
                parser.add_argument(*flags, dest=name, metavar=name.upper())
        given = {name: value for name, value in vars(parser.parse_args(argv)).items() if value is not None}
        try:
            return cls(**given)
        except InvalidValue as exc:
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
        name: prefixed[key] for name in field_hints(cls) if (key := f"{ENV_PREFIX}{name}".lower()) in prefixed
    }
    given = {**from_env, **explicit}
    chosen = given.get("ts_config")
    path = Path(chosen) if chosen else properties_path(environ)
    properties = read_properties(path) if path else {}
    from_file = {name: properties[key] for key, name in cls.TS_KEYS.items() if key in properties}
    return {**from_file, **given}


def describe_error(error: InvalidValue) -> str:
    """One line naming the invalid setting, for a service that refuses to start."""
    if not error.where:
        return f"invalid settings: {error.problem}"
    return f"invalid setting {error.where}: {error.problem}"


def _is_bool(hint: Any) -> bool:
    """Whether a setting is a flag (``bool``, optionally ``Annotated`` or ``| None``)."""
    if get_origin(hint) is Annotated:
        return _is_bool(get_args(hint)[0])
    if get_origin(hint) in (Union, types.UnionType):
        return any(_is_bool(arg) for arg in get_args(hint) if arg is not type(None))
    return hint is bool
