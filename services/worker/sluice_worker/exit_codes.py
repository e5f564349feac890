"""Exit codes of ``python -m sluice_worker``; the manager's launcher reads them."""

import enum


class ExitCode(enum.IntEnum):
    # Stopped on SIGTERM/SIGINT after finishing the batch in hand.
    OK = 0
    # The version record never appeared, or the handler (or its device) failed to load.
    LOAD_FAILED = 3
    # A handler ran past response_timeout or called sys.exit(): its batch got "Worker died.".
    HANDLER_DIED = 4
