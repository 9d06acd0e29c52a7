"""Activation functions that can stand alone or be fused into the op that produces their input.

The definition (kind + parameters) is shared by every backend; ``apply`` is the numpy reference.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

# ONNX op type -> names of its float parameters, in the order they are stored.
ACTIVATION_PARAMS: dict[str, tuple[str, ...]] = {
    "Relu": (),
    "Clip": ("min", "max"),
    "LeakyRelu": ("alpha",),
    "Sigmoid": (),
    "Tanh": (),
    "HardSigmoid": ("alpha", "beta"),
    "HardSwish": (),
}


@dataclass(frozen=True)
class Activation:
    kind: str
    params: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        expected = ACTIVATION_PARAMS[self.kind]
        if len(self.params) != len(expected):
            raise ValueError(f"{self.kind} takes parameters {expected}, got {self.params}")

    def param(self, name: str) -> float:
        return self.params[ACTIVATION_PARAMS[self.kind].index(name)]

    def __str__(self) -> str:
        if self.kind == "Clip" and self.params == (0.0, 6.0):
            return "Relu6"
        if not self.params:
            return self.kind
        args = ",".join(f"{p:g}" for p in self.params)
        return f"{self.kind}({args})"

    def apply(self, x: np.ndarray) -> np.ndarray:
        """Numpy reference; keeps x's dtype."""
        one = x.dtype.type(1)
        if self.kind == "Relu":
            return np.maximum(x, x.dtype.type(0))
        if self.kind == "Clip":
            lo, hi = self.params
            return np.clip(x, x.dtype.type(lo), x.dtype.type(hi))
        if self.kind == "LeakyRelu":
            return np.where(x >= 0, x, x * x.dtype.type(self.params[0]))
        if self.kind == "Sigmoid":
            # Split by sign so exp never overflows.
            z = np.exp(-np.abs(x))
            return np.where(x >= 0, one / (one + z), z / (one + z)).astype(x.dtype)
        if self.kind == "Tanh":
            return np.tanh(x)
        if self.kind == "HardSigmoid":
            alpha, beta = self.params
            return np.clip(x * x.dtype.type(alpha) + x.dtype.type(beta), 0, one).astype(x.dtype)
        if self.kind == "HardSwish":
            return x * np.clip(x * x.dtype.type(1 / 6) + x.dtype.type(0.5), 0, one).astype(x.dtype)
        raise AssertionError(self.kind)

    def apply_torch(self, x: "Any") -> "Any":
        """The torch twin of :meth:`apply` (fine-tuning through a fused activation)."""
        import torch
        kind = self.kind
        if kind == "Relu":
            return torch.relu(x)
        if kind == "Clip":
            lo, hi = self.params
            return torch.clamp(x, min=None if lo == -math.inf else lo, max=None if hi == math.inf else hi)
        if kind == "LeakyRelu":
            return torch.where(x >= 0, x, x * self.params[0])
        if kind == "Sigmoid":
            return torch.sigmoid(x)
        if kind == "Tanh":
            return torch.tanh(x)
        if kind == "HardSigmoid":
            alpha, beta = self.params
            return torch.clamp(x * alpha + beta, 0.0, 1.0)
        if kind == "HardSwish":
            return x * torch.clamp(x * (1.0 / 6.0) + 0.5, 0.0, 1.0)
        raise AssertionError(self.kind)
