"""``python -m sluice_manager``: settings from flags, SLUICE_* env and config.properties, then run."""

import asyncio
import os
import sys

from pydantic import ValidationError
from sluice.log import configure_logging, get_logger
from sluice.settings import describe_error

from sluice_manager.app import ConfigError, Manager
from sluice_manager.settings import ManagerSettings


def main() -> int:
    try:
        settings = ManagerSettings.from_command_line(sys.argv[1:], prog="python -m sluice_manager")
    except ValidationError as exc:
        print(f"sluice manager: {describe_error(exc)}", file=sys.stderr)
        return 2
    configure_logging("manager", settings.log_format, settings.log_level)
    log = get_logger("sluice_manager")
    try:
        return asyncio.run(_run(settings))
    except ConfigError as exc:
        log.error("manager cannot start", reason=str(exc))
        return 2
    except KeyboardInterrupt:
        return 0


async def _run(settings: ManagerSettings) -> int:
    return await Manager(settings, os.environ).run()


if __name__ == "__main__":
    sys.exit(main())
