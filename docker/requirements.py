"""Print the pinned requirements an image needs, read from pyproject.toml (one source of pins).

requirements.py PYPROJECT [EXTRA ...]   runtime: the project's dependencies plus those extras
requirements.py PYPROJECT --build       build stage: build backend and the protobuf generator
"""

import sys
import tomllib

# What scripts/gen_protos.py imports, taken from the `dev` extra and the core dependencies.
PROTO_GENERATOR = ("grpcio-tools", "mypy-protobuf", "googleapis-common-protos")


def _name(requirement: str) -> str:
    for i, char in enumerate(requirement):
        if not (char.isalnum() or char in "-_."):
            return requirement[:i].lower()
    return requirement.lower()


def main(pyproject: str, *extras: str) -> int:
    with open(pyproject, "rb") as f:
        data = tomllib.load(f)
    project = data["project"]
    optional: dict[str, list[str]] = project.get("optional-dependencies", {})
    if extras == ("--build",):
        pool = [*project["dependencies"], *optional.get("dev", [])]
        wanted = [r for r in pool if _name(r) in PROTO_GENERATOR]
        if len(wanted) != len(PROTO_GENERATOR):
            print(f"pyproject.toml must pin {', '.join(PROTO_GENERATOR)}", file=sys.stderr)
            return 1
        lines = [*data["build-system"]["requires"], *wanted]
    else:
        unknown = [e for e in extras if e not in optional]
        if unknown:
            print(f"unknown extras: {', '.join(unknown)}", file=sys.stderr)
            return 1
        lines = [*project["dependencies"], *(r for e in extras for r in optional[e])]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], *sys.argv[2:]))
