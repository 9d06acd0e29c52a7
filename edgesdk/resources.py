"""Data directories that ship with the SDK (``cl_kernels/``, ``device_configs/``).

In the repository they sit at the top level; an installed wheel carries them inside the package
(CMake installs them next to the native module), so look there first."""
from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """``edgesdk/<name>`` in an installed wheel, else ``<repository>/<name>``."""
    for candidate in (PACKAGE_DIR / name, PACKAGE_DIR.parent / name):
        if candidate.is_dir():
            return candidate
    return PACKAGE_DIR / name  # missing in both: callers report this path
