"""``python -m edgesdk.cli`` (as ``python -m edgesdk``)."""
import sys

from . import main

if __name__ == "__main__":
    sys.exit(main())
