"""TorchServe ``config.properties`` support: parse the file and feed its keys to settings.

Lookup follows TorchServe: ``TS_CONFIG_FILE``, then ``--ts-config`` (which the CLI passes on as
``SLUICE_TS_CONFIG``); ``$$ENV_VAR$$`` references are expanded.
"""

import os
import re
from collections.abc import Mapping
from pathlib import Path

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


def properties_path(environ: Mapping[str, str] = os.environ) -> Path | None:
    path = environ.get("TS_CONFIG_FILE") or environ.get("SLUICE_TS_CONFIG")
    return Path(path) if path else None


def read_properties(path: Path) -> dict[str, str]:
    """The keys of the properties file at ``path``; none when there is no such file."""
    return parse_properties(path.read_text()) if path.is_file() else {}
