"""``python -m edgesdk``: the ``edgesdk`` command, for environments whose scripts folder is not on PATH."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
