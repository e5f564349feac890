"""``python -m sluice_gateway``: settings from flags, ``SLUICE_*`` and config.properties; uvloop."""

import sys

import uvloop
from pydantic import ValidationError
from sluice.log import configure_logging
from sluice.settings import describe_error

from sluice_gateway.app import serve
from sluice_gateway.settings import GatewaySettings


def main() -> int:
    try:
        settings = GatewaySettings.from_command_line(sys.argv[1:], prog="python -m sluice_gateway")
    except ValidationError as exc:
        print(f"sluice gateway: {describe_error(exc)}", file=sys.stderr)
        return 2
    configure_logging("gateway", settings.log_format, settings.log_level)
    uvloop.run(serve(settings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
