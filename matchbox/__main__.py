"""``python -m matchbox``: the command line (see :mod:`matchbox.cli`)."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
