"""Memory sizes as people write them: ``512m``, ``2g``, ``1.5GiB``, or a plain number of bytes (the
forms ``docker run --memory`` takes, in either case, with or without the ``i``/``b``)."""

import re

_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", re.IGNORECASE)
_FACTORS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def parse_bytes(text: str) -> int:
    """Bytes of ``text``; ValueError names the text when it is not a size."""
    match = _SIZE.fullmatch(text)
    if match is None:
        raise ValueError(f"not a memory size: {text!r} (examples: 512m, 2g, 1073741824)")
    number, unit = match.groups()
    return int(float(number) * _FACTORS[unit.lower()])
