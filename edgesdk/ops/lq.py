"""LQ-Nets activation quantization (seed 002): ``LQQuantize``, edgesdk's own op.

``y = nearest level of x`` among the 2^K levels ``offset + sum_i basis[i] * bit_i(v)`` (attributes
``basis``, K = 1..8 numbers, and ``offset``; :mod:`edgesdk.compress.lq` defines the levels, the
thresholds and the tie rule). NaN stays NaN, +-Inf become the extreme levels. The op sits in front
of a Conv / Gemm whose weights are binary-coded (:class:`~edgesdk.compress.encodings.LQBinary`):
together they are one LQ layer, which the cpu backend runs as a bitwise (popcount) product; every
other backend runs the op and the layer as they stand, with the same result up to float rounding.

No ONNX op imports to it (ONNX has no such quantizer); edgesdk writes it (``edgesdk finetune
--recipe lq-2w2a``, or ``pack`` with ``lq_act_bits`` and calibration data).
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import UnsupportedModelError
from .registry import FLOAT, Signature, floats, op

MAX_BITS = 8  # edgesdk.compress.lq.MAX_BITS (not imported: the registry stays light)

lq_quantize = op("LQQuantize", family="lq", signature=Signature(1, 0, {"basis": floats(), "offset": FLOAT}),
                 note="edgesdk's LQ-Nets activation quantizer (the input of a binary-coded layer)")


@lq_quantize.check
def _check_lq(node, shapes, dtype, limit) -> None:
    basis, offset = node.attrs["basis"], node.attrs["offset"]
    if not 1 <= len(basis) <= MAX_BITS or not all(math.isfinite(float(v)) for v in basis) \
            or not math.isfinite(float(offset)):
        raise UnsupportedModelError(f"node {node.name!r}: LQQuantize needs 1..{MAX_BITS} finite basis values and a "
                                    f"finite offset, got basis {list(basis)} and offset {offset}")


@lq_quantize.shape
def _lq_shape(node, shapes):
    return [shapes[0]]


@lq_quantize.macs
def _lq_macs(node, graph) -> int:
    return 0


@lq_quantize.reference
def _lq_reference(node, x: np.ndarray) -> np.ndarray:
    from ..compress.lq import quantize_activations
    return quantize_activations(x, np.asarray(node.attrs["basis"], np.float32), float(node.attrs["offset"]))


def level_table(node) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(levels in code order, thresholds, codes) of an LQQuantize node: what kernels take."""
    from ..compress.lq import activation_levels, level_table as table
    levels = activation_levels(np.asarray(node.attrs["basis"], np.float32), float(node.attrs["offset"]))
    thresholds, codes = table(levels)
    return levels, thresholds, codes


@lq_quantize.torch
def _lq_torch(m, node, x):
    """The forward pass rounds to the levels; the gradient passes straight through (the STE of
    LQ-Nets), so a graph holding LQQuantize still fine-tunes."""
    import torch
    levels, thresholds, codes = level_table(node)
    sorted_levels = torch.as_tensor(levels[codes], dtype=x.dtype, device=x.device)
    index = torch.bucketize(x, torch.as_tensor(thresholds, dtype=x.dtype, device=x.device), right=False)
    q = torch.where(torch.isnan(x), x, sorted_levels[index])
    from ..compress.torch_bridge import straight_through  # torch lowerings run inside the bridge
    return straight_through(x, q)
