"""Evaluation datasets.

``digits`` is scikit-learn's 8x8 handwritten digits set (1797 images), split once (seed 0, 20%
test, stratified) so that training (tools/train_default_model.py), ``edgesdk eval --data digits``,
``finetune`` and ``quickstart`` all see the same held-out images. The split ships inside the
package as ``edgesdk/data/digits.npz`` (written by tools/make_digits_npz.py, which needs
scikit-learn; edgesdk itself does not).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import DatasetError

DIGITS_SEED = 0
DIGITS_TEST_FRACTION = 0.2
# The split above, precomputed (x float32 (N, 1, 8, 8) pixel/16, y int64 labels).
DIGITS_FILE = Path(__file__).resolve().parent / "data" / "digits.npz"


@dataclass(frozen=True)
class Dataset:
    name: str
    x: np.ndarray  # float32, NCHW
    y: np.ndarray  # int64 labels

    def __len__(self) -> int:
        return len(self.y)


def digits_split() -> tuple[Dataset, Dataset]:
    """Train and test splits of the digits set as float32 (N, 1, 8, 8) in [0, 1] (1437 and 360
    images), fresh arrays on every call."""
    try:
        with np.load(DIGITS_FILE, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in ("x_train", "y_train", "x_test", "y_test")}
    except Exception as exc:  # OSError, BadZipFile, zlib.error, KeyError: a broken install, not a user error
        raise DatasetError(f"the bundled digits split {DIGITS_FILE} is missing or damaged "
                           f"({exc.__class__.__name__}: {exc}); reinstall edgesdk") from None
    return (Dataset("digits-train", arrays["x_train"], arrays["y_train"]),
            Dataset("digits-test", arrays["x_test"], arrays["y_test"]))


def load_dataset(spec: str) -> Dataset:
    """``digits`` (the held-out digits split) or a path to an .npz with arrays ``x`` and ``y``."""
    if spec == "digits":
        return digits_split()[1]
    path = Path(spec)
    if not path.exists():
        raise DatasetError(f"dataset {spec!r} not found: use 'digits' or a path to an .npz with arrays x and y")
    try:
        with np.load(path, allow_pickle=False) as npz:
            if "x" not in npz or "y" not in npz:
                raise DatasetError(f"{spec}: the .npz must hold arrays named 'x' and 'y' (has {sorted(npz.files)})")
            x, y = npz["x"], npz["y"]
    except DatasetError:
        raise
    except Exception as exc:  # zipfile/pickle/format errors all mean "not a readable npz"
        raise DatasetError(f"{spec}: not a readable .npz file ({exc.__class__.__name__}: {exc})") from None
    if len(x) != len(y):
        raise DatasetError(f"{spec}: x has {len(x)} samples but y has {len(y)}")
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
        raise DatasetError(f"{spec}: y must be a 1-D array of integer class labels (got {y.dtype} {y.shape})")
    return Dataset(path.stem, np.ascontiguousarray(x, dtype=np.float32), y.astype(np.int64))


def load_calibration(spec: str) -> np.ndarray:
    """Calibration inputs: ``digits`` (the digits training split, never the test split the
    accuracy is measured on) or an .npz whose array ``x`` holds N model inputs."""
    if spec == "digits":
        return digits_split()[0].x
    path = Path(spec)
    if not path.exists():
        raise DatasetError(f"calibration data {spec!r} not found: use 'digits' or an .npz with an array x")
    try:
        with np.load(path, allow_pickle=False) as npz:
            if "x" not in npz:
                raise DatasetError(f"{spec}: the .npz must hold the inputs as an array named 'x' (has {sorted(npz.files)})")
            x = npz["x"]
    except DatasetError:
        raise
    except Exception as exc:  # zipfile/pickle/format errors all mean "not a readable npz"
        raise DatasetError(f"{spec}: not a readable .npz file ({exc.__class__.__name__}: {exc})") from None
    if not np.issubdtype(x.dtype, np.number) or x.ndim < 1 or len(x) == 0:
        raise DatasetError(f"{spec}: x must be a non-empty numeric array of inputs (got {x.dtype} {x.shape})")
    return np.ascontiguousarray(x, dtype=np.float32)
