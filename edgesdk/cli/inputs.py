"""What every ``edgesdk`` command shares on the way in: argparse value types, ``--input-shape``,
``--input``/``--random`` feeds, the output folder check and the Session a model command runs.

Imports nothing heavy (numpy only); the Session is imported when one is made.
"""
from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import InputError

_log = logging.getLogger("edgesdk.cli")


# -- argparse types --------------------------------------------------------------------------
def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (a usage error, exit 2, otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def percentage_points(text: str) -> float:
    """argparse type: accuracy points in [0, 100] (1.5 means 1.5 percentage points)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected percentage points such as 1.0, got {text!r}") from None
    if not 0 <= value <= 100:
        raise argparse.ArgumentTypeError(f"expected percentage points in [0, 100], got {text}")
    return value


def parse_size(text: str, option: str = "--memory-budget") -> int:
    """``64M``, ``1.5G``, ``65536``, ``512KiB`` -> bytes (binary units, as EDGESDK_MAX_TENSOR_BYTES:
    runtime.sizes.parse_size); anything else, or a size that is not positive, is a one-line InputError."""
    from ..runtime.sizes import parse_size as parse_bytes
    value = parse_bytes(text)
    if value is None:
        raise InputError(f"{option} {text!r}: expected a positive size in bytes, e.g. 67108864, 64M or 1.5G")
    return value


# -- arguments -------------------------------------------------------------------------------
def parse_input_shapes(specs: Sequence[str] | None) -> dict[str, tuple[int, ...]] | None:
    """``NAME=1x3x224x224`` -> {NAME: (1, 3, 224, 224)}."""
    if not specs:
        return None
    shapes = {}
    for spec in specs:
        name, sep, dims = spec.rpartition("=")
        try:
            shape = tuple(int(d) for d in dims.lower().split("x"))
        except ValueError:
            shape = ()
        if not sep or not name or not shape or min(shape) <= 0:
            raise InputError(f"--input-shape {spec!r}: expected NAME=DxDx... e.g. input=1x3x224x224")
        shapes[name] = shape
    return shapes


def parse_outputs(specs: Sequence[str] | None) -> list[str] | None:
    """``--outputs a,b --outputs c`` -> ["a", "b", "c"] (None when not given)."""
    if not specs:
        return None
    names = [name.strip() for spec in specs for name in spec.split(",")]
    if not all(names):
        raise InputError(f"--outputs {','.join(specs)!r}: expected tensor names separated by commas")
    return names


def check_output_folder(output: str) -> None:
    """-o into a folder that does not exist fails now, not after the work."""
    folder = Path(output).resolve().parent
    if not folder.is_dir():
        raise InputError(f"-o {output}: folder {str(folder)!r} does not exist")


def load_feeds(args: argparse.Namespace, sess) -> dict[str, np.ndarray]:
    """The model inputs of ``--random`` (seeded by ``--seed``) or ``--input`` (.npy/.npz)."""
    if args.random:
        rng = np.random.default_rng(args.seed)
        return {n: rng.standard_normal(s).astype(np.float32) for n, s in sess.input_shapes.items()}
    path = Path(args.input)
    if not path.is_file():
        raise InputError(f"input file {args.input!r} not found")
    try:
        loaded = np.load(path, allow_pickle=False)
    except Exception as exc:
        raise InputError(f"{args.input}: not a readable .npy/.npz file ({exc})") from None
    if isinstance(loaded, np.ndarray):
        if len(sess.input_names) != 1:
            raise InputError(f"the model has inputs {sess.input_names}: pass an .npz with one array per input")
        feeds = {sess.input_names[0]: loaded}
    else:
        with loaded:
            feeds = {k: loaded[k] for k in loaded.files}
    # Float inputs saved as float64 (numpy's default) are cast; anything else must already match.
    return {k: v.astype(np.float32) if v.dtype.kind == "f" else v for k, v in feeds.items()}


# -- the session -----------------------------------------------------------------------------
def open_session(args: argparse.Namespace, model: Any = None, **overrides: Any):
    """The Session of ``args.model`` (or ``model``) with the command's --backend, --precision,
    --threads, --input-shape and --no-optimize; ``overrides`` win. -v logs what was chosen."""
    from ..runtime.session import Session
    options = dict(backend=getattr(args, "backend", "auto"),
                   precision=getattr(args, "precision", "fp32"),
                   threads=getattr(args, "threads", None),
                   input_shapes=parse_input_shapes(getattr(args, "input_shape", None)),
                   outputs=parse_outputs(getattr(args, "outputs", None)),
                   optimize=not getattr(args, "no_optimize", False))
    options.update(overrides)
    session = Session(model if model is not None else args.model, **options)
    device = getattr(session._impl, "device_label", None)  # cpu backend: CPU model, kernel path, threads
    _log.info("backend %s%s, precision %s (asked for %s)", session.backend, f" on {device}" if device else "",
              session.precision, options["backend"])
    return session
