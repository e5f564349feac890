"""``python -m sluice_cli``: the same as the ``sluice`` command."""

import sys

from sluice_cli.main import main

if __name__ == "__main__":
    sys.exit(main())
