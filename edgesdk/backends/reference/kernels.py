"""The reference backend's op table: op type -> numpy kernel.

A kernel takes the node (for its normalised attributes) and its input arrays (None for omitted
optional inputs) and returns one array or a tuple of arrays, one per node output. Fused
activations are applied by the executor, not by kernels.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ...graph import Node

Kernel = Callable[..., "np.ndarray | tuple[np.ndarray, ...]"]
KERNELS: dict[str, Kernel] = {}


def kernel(*ops: str) -> Callable[[Kernel], Kernel]:
    def register(fn: Kernel) -> Kernel:
        for op in ops:
            if op in KERNELS:
                raise AssertionError(f"two reference kernels for {op}")
            KERNELS[op] = fn
        return fn
    return register


def evaluate(node: Node, inputs: list[np.ndarray | None]) -> tuple[np.ndarray, ...]:
    """Run one node on the reference kernels, fused activation included. NaN and infinities give
    their IEEE results silently, as in ONNX Runtime (no numpy "invalid value" warnings)."""
    with np.errstate(all="ignore"):
        result = KERNELS[node.op](node, *inputs)
        outputs = result if isinstance(result, tuple) else (result,)
        fused = node.attrs.get("fused_activation")
        if fused is not None:
            outputs = (fused.apply(outputs[0]),) + outputs[1:]
    return outputs
