"""TorchServe ``config.properties`` support: parse the file and feed its keys to settings.

Lookup follows TorchServe: ``TS_CONFIG_FILE``, then ``--ts-config`` (which the CLI passes on as
``SLUICE_TS_CONFIG``); ``$$ENV_VAR$$`` references are expanded.
"""

import os
import re
from pathlib import Path
from typing import Any, ClassVar

from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

_ENV_REF = re.compile(r"\$\$([A-Za-z_][A-Za-z0-9_]*)\$\$")


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java ``.properties`` text: ``key=value`` or ``key: value``, ``#``/``!`` comments,
    backslash line continuations."""
    result: dict[str, str] = {}
    pending = ""
    for raw_line in text.splitlines():
        line = pending + raw_line.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        match = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)", line)
        if match is None:
            result[line] = ""
            continue
        key, value = match.groups()
        result[key] = _ENV_REF.sub(lambda m: os.environ.get(m.group(1), ""), value.strip())
    return result


def properties_path(environ: dict[str, str] | os._Environ[str] = os.environ) -> Path | None:
    path = environ.get("TS_CONFIG_FILE") or environ.get("SLUICE_TS_CONFIG")
    return Path(path) if path else None


class PropertiesSource(PydanticBaseSettingsSource):
    """Settings source for the TorchServe keys a settings class declares in ``TS_KEYS``."""

    def __init__(self, settings_cls: type[BaseSettings]) -> None:
        super().__init__(settings_cls)
        self._ts_keys: dict[str, str] = getattr(settings_cls, "TS_KEYS", {})
        self._loaded: dict[str, str] | None = None

    @property
    def _values(self) -> dict[str, str]:
        # Read lazily: an explicit ``ts_config`` (flag or SLUICE_TS_CONFIG) comes from the sources
        # before this one and is only known once they ran.
        if self._loaded is None:
            explicit = self.current_state.get("ts_config")
            path = Path(explicit) if explicit else properties_path()
            self._loaded = parse_properties(path.read_text()) if path and path.is_file() else {}
        return self._loaded

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        for ts_key, name in self._ts_keys.items():
            if name == field_name and ts_key in self._values:
                return self._values[ts_key], field_name, False
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for ts_key, field_name in self._ts_keys.items():
            if ts_key in self._values:
                found[field_name] = self._values[ts_key]
        return found


class TorchServeKeys:
    """Mixin documenting the ``TS_KEYS`` contract: TorchServe key -> settings field name."""

    TS_KEYS: ClassVar[dict[str, str]] = {}
