"""Precision modes and the per-op policy every backend follows.

``fp16`` means fp16 *storage* (weights and activations rounded to half) with fp32 arithmetic and
accumulation. Ops whose results are sensitive to rounding keep fp32 outputs.
"""
from __future__ import annotations

import numpy as np

from ..ops import OPS

PRECISIONS = ("fp32", "fp16")

# Normalisations and softmax sum many terms or divide by small numbers: keep them in fp32
# (``OpSpec.fp32_only``).
FP32_ONLY_OPS = frozenset(name for name, spec in OPS.items() if spec.fp32_only)


def round_constant(x: np.ndarray, precision: str) -> np.ndarray:
    """A constant as an fp16 session stores it: rounded to half, except one-element constants.

    A scalar (the scale and bias of PP-LCNetV3's learnable affine blocks, a Mul by 0.5 in a GELU)
    shifts a whole tensor by the same relative error when rounded, layer after layer, so the errors
    add up instead of averaging out: PP-OCRv4 rec's 177 such scalars alone cost it 1.4e-2 in fp16.
    Kept in fp32 they cost nothing (every backend reads them as a float argument)."""
    return x if np.size(x) <= 1 else round_to_storage(x, precision)


def round_to_storage(x: np.ndarray, precision: str) -> np.ndarray:
    """What a value looks like after a round trip through the storage format of ``precision``."""
    if precision == "fp16" and x.dtype == np.float32:
        return x.astype(np.float16).astype(np.float32)
    return x
