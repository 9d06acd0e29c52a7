#!/usr/bin/env python3
"""Write ``edgesdk/data/digits.npz``: the digits split every part of the SDK uses, so that
edgesdk itself needs no scikit-learn at run time.

The arrays are exactly what ``sklearn.datasets.load_digits`` followed by
``train_test_split(test_size=0.2, random_state=0, stratify=y)`` give (the split the default model
was trained and measured on): ``x_train`` (1437, 1, 8, 8) and ``x_test`` (360, 1, 8, 8) float32
pixels / 16 in [0, 1], ``y_train`` / ``y_test`` int64 labels. tests/test_install.py regenerates
them and requires identical arrays.

    python tools/make_digits_npz.py [--out edgesdk/data/digits.npz]

Needs scikit-learn (the ``dev`` extra).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "edgesdk" / "data" / "digits.npz"
# The split's parameters; edgesdk.datasets states the same numbers (DIGITS_SEED, DIGITS_TEST_FRACTION).
SEED = 0
TEST_FRACTION = 0.2


def digits_arrays() -> dict[str, np.ndarray]:
    """The split computed with scikit-learn, as the arrays the .npz holds."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    x = (bunch.images.astype(np.float32) / 16.0)[:, None, :, :]
    y = bunch.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=TEST_FRACTION, random_state=SEED, stratify=y)
    return {"x_train": np.ascontiguousarray(x_train), "y_train": np.ascontiguousarray(y_train),
            "x_test": np.ascontiguousarray(x_test), "y_test": np.ascontiguousarray(y_test)}


def write(out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez_compressed(fh, **digits_arrays())
        os.chmod(tmp, 0o644)  # mkstemp makes it 0600
        os.replace(tmp, out)  # atomic: a reader never sees half a file
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    path = write(args.out)
    print(f"wrote {path} ({path.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
