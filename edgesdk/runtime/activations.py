"""Activation functions that can stand alone or be fused into the op that produces their input.

The definition (kind + parameters) is shared by every backend; ``apply`` is the numpy reference
and ``apply_torch`` its torch twin. The kinds are ONNX op types: the importer turns each ONNX
activation node into one, and graph passes turn the patterns exporters emit for the rest into them
(x * Sigmoid(x) -> Swish, the Erf and Tanh formulas of GELU -> Gelu, x * Tanh(Softplus(x)) -> Mish).

NaN and infinities give what ONNX Runtime gives: IEEE arithmetic on the ONNX formula, so a
product x * f(x) whose f vanishes at -inf (Gelu, Mish, Swish, HardSwish) is -inf * 0 = NaN there.
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
    "Gelu": ("approximate",),  # an index into GELU_APPROXIMATIONS
    "Erf": (),
    "Exp": (),
    "Log": (),
    "Abs": (),
    "Sqrt": (),
    "Reciprocal": (),
    "Neg": (),
    "Softplus": (),
    "Mish": (),
    "Swish": ("alpha",),  # x * sigmoid(alpha * x); alpha 1 is SiLU
}
# Gelu's ONNX attribute ``approximate`` (a string) as the float parameter packages store.
GELU_APPROXIMATIONS = ("none", "tanh")
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_erfc = np.frompyfunc(math.erfc, 1, 1)  # libm's, in double: the oracle needs no approximation
_erf = np.frompyfunc(math.erf, 1, 1)


@dataclass(frozen=True)
class Activation:
    kind: str
    params: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        expected = ACTIVATION_PARAMS[self.kind]
        if len(self.params) != len(expected):
            raise ValueError(f"{self.kind} takes parameters {expected}, got {self.params}")
        if self.kind == "Gelu" and self.params[0] not in range(len(GELU_APPROXIMATIONS)):
            raise ValueError(f"Gelu approximate is {self.params[0]}; expected 0 (none) or 1 (tanh)")

    def param(self, name: str) -> float:
        return self.params[ACTIVATION_PARAMS[self.kind].index(name)]

    @property
    def gelu_approximation(self) -> str:
        """"none" (erf) or "tanh", for a Gelu."""
        return GELU_APPROXIMATIONS[int(self.param("approximate"))]

    def varying_range(self) -> tuple[float, float]:
        """The input interval outside of which the output is constant (Relu below 0, HardSwish
        below -3, HardSigmoid outside its ramp, Clip outside its bounds); (-inf, inf) for the
        others. Quantization clips an input it alone reads to it: the values beyond cost no codes."""
        if self.kind == "Relu":
            return 0.0, math.inf
        if self.kind == "Clip":
            return self.params[0], self.params[1]
        if self.kind == "HardSwish":
            return -3.0, math.inf
        if self.kind == "HardSigmoid" and self.params[0] != 0:
            alpha, beta = self.params
            ends = sorted((-beta / alpha, (1 - beta) / alpha))
            return ends[0], ends[1]
        return -math.inf, math.inf

    @property
    def fusable(self) -> bool:
        """Every backend can apply it in a producer's epilogue (their kernels have no Swish
        with a slope other than 1)."""
        return self.kind != "Swish" or self.params[0] == 1.0

    def __str__(self) -> str:
        if self.kind == "Clip" and self.params == (0.0, 6.0):
            return "Relu6"
        if self.kind == "Gelu":
            return "Gelu" if self.gelu_approximation == "none" else "Gelu(tanh)"
        if self.kind == "Swish" and self.params == (1.0,):
            return "Silu"
        if not self.params:
            return self.kind
        args = ",".join(f"{p:g}" for p in self.params)
        return f"{self.kind}({args})"

    def apply(self, x: np.ndarray) -> np.ndarray:
        """Numpy reference; keeps x's dtype."""
        if self.kind in _MATH:
            return _MATH[self.kind](self, x)
        one = x.dtype.type(1)
        if self.kind == "Relu":
            return np.maximum(x, x.dtype.type(0))
        if self.kind == "Clip":
            lo, hi = self.params
            return np.clip(x, x.dtype.type(lo), x.dtype.type(hi))
        if self.kind == "LeakyRelu":
            return np.where(x >= 0, x, x * x.dtype.type(self.params[0]))
        if self.kind == "Sigmoid":
            return _sigmoid(x).astype(x.dtype)
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
        import torch.nn.functional as F
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
        if kind == "Gelu":
            return F.gelu(x, approximate=self.gelu_approximation)
        if kind == "Softplus":
            return torch.logaddexp(x, torch.zeros_like(x))  # no threshold: the ONNX formula
        if kind == "Mish":
            return x * torch.tanh(torch.logaddexp(x, torch.zeros_like(x)))
        if kind == "Swish":
            return x * torch.sigmoid(x * self.params[0])
        unary = {"Erf": torch.erf, "Exp": torch.exp, "Log": torch.log, "Abs": torch.abs, "Sqrt": torch.sqrt,
                 "Reciprocal": torch.reciprocal, "Neg": torch.neg}
        return unary[kind](x)


# -- the math kinds: evaluated in float64 and rounded once to x's dtype ------------------------
def _sigmoid(x: np.ndarray) -> np.ndarray:
    # Split by sign so exp never overflows.
    one = x.dtype.type(1)
    z = np.exp(-np.abs(x))
    return np.where(x >= 0, one / (one + z), z / (one + z))


def _in_float64(fn):
    """A float formula as a reference kernel: computed in double, returned in x's dtype."""
    def apply(act: Activation, x: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):  # IEEE results (log(0) = -inf...), as ONNX Runtime, silently
            return np.asarray(fn(act, np.asarray(x, np.float64))).astype(x.dtype)
    return apply


def _gelu(act: Activation, x: np.ndarray) -> np.ndarray:
    if act.gelu_approximation == "tanh":
        # 0.5 (1 + tanh(u)) = sigmoid(2u): no cancellation for negative x
        return x * _sigmoid(2.0 * _SQRT_2_OVER_PI * (x + 0.044715 * x ** 3))
    # x Phi(x) with Phi(x) = erfc(-x / sqrt 2) / 2: exact in the negative tail too
    return x * 0.5 * _erfc(-x * math.sqrt(0.5)).astype(np.float64)


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x)


_MATH = {
    "Gelu": _in_float64(_gelu),
    "Erf": _in_float64(lambda act, x: _erf(x).astype(np.float64)),
    "Exp": _in_float64(lambda act, x: np.exp(x)),
    "Log": _in_float64(lambda act, x: np.log(x)),
    "Sqrt": _in_float64(lambda act, x: np.sqrt(x)),
    "Reciprocal": _in_float64(lambda act, x: 1.0 / x),
    "Softplus": _in_float64(lambda act, x: _softplus(x)),
    "Mish": _in_float64(lambda act, x: x * np.tanh(_softplus(x))),
    "Swish": _in_float64(lambda act, x: x * _sigmoid(x * act.params[0])),
    # exact in any dtype (integer constants fold through them too)
    "Abs": lambda act, x: np.abs(x),
    "Neg": lambda act, x: np.negative(x),
}
