"""Fail the image build when the sluice-serve wheel misses a Python package of the source tree
(pyproject.toml lists packages one by one; a new subpackage left out works in the editable dev
install and breaks only in images).

    check_wheel.py PYPROJECT WHEEL
"""

import sys
import tomllib
import zipfile
from pathlib import Path


def main(pyproject: str, wheel: str) -> int:
    with open(pyproject, "rb") as f:
        package_dirs: dict[str, str] = tomllib.load(f)["tool"]["setuptools"]["package-dir"]
    root = Path(pyproject).parent
    with zipfile.ZipFile(wheel) as archive:
        packaged = set(archive.namelist())
    missing = []
    for package, folder in package_dirs.items():
        base = root / folder
        for init in sorted(base.rglob("__init__.py")):
            relative = init.parent.relative_to(base)
            if "__pycache__" in relative.parts:
                continue
            entry = Path(package, relative, "__init__.py").as_posix()
            if entry not in packaged:
                missing.append(".".join(Path(package, relative).parts))
    if missing:
        print(f"{Path(wheel).name} lacks packages {', '.join(missing)}: add them to", file=sys.stderr)
        print("[tool.setuptools] packages in pyproject.toml", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
