"""Broadcasting arithmetic and stand-alone activations."""
from __future__ import annotations

import numpy as np

from ...graph import Node
from .kernels import kernel


@kernel("Add")
def add(node: Node, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.add(a, b)


@kernel("Sub")
def sub(node: Node, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.subtract(a, b)


@kernel("Mul")
def mul(node: Node, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.multiply(a, b)


@kernel("Div")
def div(node: Node, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.issubdtype(a.dtype, np.integer):
        # ONNX integer division truncates toward zero; numpy's // floors.
        return (np.abs(a) // np.abs(b) * np.sign(a) * np.sign(b)).astype(a.dtype)
    return np.divide(a, b)


@kernel("Relu", "Clip", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish")
def activation(node: Node, x: np.ndarray) -> np.ndarray:
    return node.attrs["activation"].apply(x)
