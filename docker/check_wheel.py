"""Fail the image build when the sluice-serve wheel misses a Python package of the source tree (a
package that works in the editable dev install and would break only in images).

    check_wheel.py PYPROJECT WHEEL
"""

import sys
import tomllib
import zipfile
from pathlib import Path


def main(pyproject: str, wheel: str) -> int:
    with open(pyproject, "rb") as f:
        roots: list[str] = tomllib.load(f)["tool"]["setuptools"]["packages"]["find"]["where"]
    base = Path(pyproject).parent
    with zipfile.ZipFile(wheel) as archive:
        packaged = set(archive.namelist())
    missing = []
    for root in roots:
        for init in sorted((base / root).rglob("__init__.py")):
            relative = init.relative_to(base / root)
            if "__pycache__" not in relative.parts and relative.as_posix() not in packaged:
                missing.append(".".join(relative.parent.parts))
    if missing:
        print(f"{Path(wheel).name} lacks packages {', '.join(missing)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
