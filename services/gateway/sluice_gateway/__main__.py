"""``python -m sluice_gateway``: settings from flags, ``SLUICE_*`` and config.properties; uvloop."""

import sys

import uvloop
from sluice.large_buffers import keep_large_buffers
from sluice.log import configure_logging
from sluice.transport.grpc_poller import use_completion_queue_poller

from sluice_gateway.settings import GatewaySettings


def main() -> None:
    settings = GatewaySettings.from_command_line(sys.argv[1:], prog="python -m sluice_gateway")
    configure_logging("gateway", settings.log_format, settings.log_level)
    keep_large_buffers()
    use_completion_queue_poller()
    from sluice_gateway.app import serve  # imports grpc, which reads GRPC_EXPERIMENTS as it loads

    uvloop.run(serve(settings))


if __name__ == "__main__":
    main()
