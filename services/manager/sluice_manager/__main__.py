"""``python -m sluice_manager``: settings from flags, SLUICE_* env and config.properties, then run."""

import asyncio
import os
import sys

from sluice.log import configure_logging, get_logger
from sluice.transport.grpc_poller import use_completion_queue_poller

from sluice_manager.settings import ManagerSettings


def main() -> int:
    settings = ManagerSettings.from_command_line(sys.argv[1:], prog="python -m sluice_manager")
    configure_logging("manager", settings.log_format, settings.log_level)
    log = get_logger("sluice_manager")
    use_completion_queue_poller()
    from sluice_manager.app import ConfigError  # imports grpc, which reads GRPC_EXPERIMENTS as it loads

    try:
        return asyncio.run(_run(settings))
    except ConfigError as exc:
        log.error("manager cannot start", reason=str(exc))
        return 2
    except KeyboardInterrupt:
        return 0


async def _run(settings: ManagerSettings) -> int:
    from sluice_manager.app import Manager

    return await Manager(settings, os.environ).run()


if __name__ == "__main__":
    sys.exit(main())
