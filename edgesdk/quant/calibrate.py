"""Calibration: the real range each activation tensor is quantized over, from the user's data.

The float model runs on the calibration inputs with every tensor to be quantized as an output;
an observer per tensor keeps its exact min and max and a bounded random sample of its values,
from which the methods choose the range:

- ``minmax``: the observed min and max (TFLite's and ONNX Runtime's default);
- ``percentile``: the ``percentile``-th and (100 - ``percentile``)-th percentiles (outliers clipped);
- ``mse``: the range among shrinkings of [min, max] that minimises the mean squared error of
  quantizing the sampled values (what OpenVINO/TensorRT-style searches do, on a sample).

Entropy (KL) calibration is not offered: on the models measured here MSE matched or beat it
while needing no histogram heuristics (bin count, smoothing) to be tuned.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError

METHODS = ("minmax", "percentile", "mse")
SAMPLE_CAP = 1 << 16  # values kept per tensor: enough for a 99.99th percentile, bounded memory


@dataclass
class Observer:
    """Running min, max and a uniform random sample of one tensor's values."""
    low: float = math.inf
    high: float = -math.inf
    seen: int = 0
    samples: list[np.ndarray] = field(default_factory=list)
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))

    def update(self, x: np.ndarray) -> None:
        values = np.asarray(x, np.float32).reshape(-1)
        finite = values[np.isfinite(values)]
        if finite.size == 0:
            return
        self.low = min(self.low, float(finite.min()))
        self.high = max(self.high, float(finite.max()))
        self.seen += 1
        take = min(finite.size, SAMPLE_CAP)
        self.samples.append(self.rng.choice(finite, take, replace=False) if take < finite.size else finite.copy())
        kept = sum(s.size for s in self.samples)
        if kept > 2 * SAMPLE_CAP:  # thin all batches alike so every batch stays represented
            pool = np.concatenate(self.samples)
            self.samples = [self.rng.choice(pool, SAMPLE_CAP, replace=False)]

    def sample(self) -> np.ndarray:
        return np.concatenate(self.samples) if self.samples else np.zeros(1, np.float32)


def affine_params(low: float, high: float, dtype: np.dtype = np.dtype(np.uint8)) -> tuple[np.float32, int]:
    """(scale, zero point) of an asymmetric 8-bit quantization of [low, high] (widened to hold 0,
    so that zero and padding are exact)."""
    low, high = min(float(low), 0.0), max(float(high), 0.0)
    qmin, qmax = (0, 255) if np.dtype(dtype) == np.uint8 else (-128, 127)
    if high - low <= 0 or not math.isfinite(high - low):
        return np.float32(1.0), (0 if qmin == 0 else 0)
    scale = np.float32((high - low) / (qmax - qmin))
    zp = int(np.clip(round(qmin - low / float(scale)), qmin, qmax))
    return scale, zp


def fake_quantize(x: np.ndarray, scale: float, zp: int, qmin: int = 0, qmax: int = 255) -> np.ndarray:
    q = np.clip(np.rint(x / np.float32(scale)) + zp, qmin, qmax)
    return ((q - zp) * np.float32(scale)).astype(np.float32)


def choose_range(obs: Observer, method: str, percentile: float = 99.99) -> tuple[float, float]:
    """The [low, high] a tensor is quantized over."""
    if method not in METHODS:
        raise InputError(f"calibration method {method!r} is not one of {', '.join(METHODS)}")
    if obs.seen == 0:
        return 0.0, 0.0
    if method == "minmax":
        return obs.low, obs.high
    values = obs.sample()
    if method == "percentile":
        low = float(np.percentile(values, 100.0 - percentile)) if obs.low < 0 else obs.low
        high = float(np.percentile(values, percentile)) if obs.high > 0 else obs.high
        return min(low, 0.0), max(high, 0.0)
    return _mse_range(values, obs.low, obs.high)


def _mse_range(values: np.ndarray, low: float, high: float) -> tuple[float, float]:
    """Shrink [low, high] by factors in (0, 1] (both ends alike, the end nearer zero kept at
    zero when it is there) and keep the factor with the least quantization MSE on the sample."""
    best, best_err = (low, high), math.inf
    for factor in np.linspace(1.0, 0.2, 41):
        lo, hi = min(low, 0.0) * factor, max(high, 0.0) * factor
        scale, zp = affine_params(lo, hi)
        err = float(np.mean((fake_quantize(values, scale, zp) - values) ** 2))
        if err < best_err * (1 - 1e-6):
            best, best_err = (lo, hi), err
    return best


def calibration_inputs(graph, x: np.ndarray) -> list[dict[str, np.ndarray]]:
    """Feeds for the graph's one input from calibration samples ``x`` (N, ...): one sample per
    run at the model's batch size (batch 1 models take them one at a time)."""
    if len(graph.inputs) != 1:
        raise InputError(f"calibration feeds one input; the model has {len(graph.inputs)} "
                         f"({', '.join(graph.inputs)}): quantize it from Python with a feed list")
    name = graph.inputs[0]
    shape = graph.tensors[name].shape
    x = np.asarray(x, np.float32)
    if x.ndim == len(shape) - 1:
        x = x[:, None] if shape[1] == 1 and x.shape[1:] != tuple(shape[1:]) else x[None]
    if tuple(x.shape[1:]) != tuple(shape[1:]):
        raise InputError(f"calibration samples have shape {tuple(x.shape[1:])} but input {name!r} takes "
                         f"{tuple(shape[1:])} per sample: give x as (N, {', '.join(map(str, shape[1:]))})")
    batch = shape[0] if shape else 1
    if len(x) < batch:
        raise InputError(f"calibration needs at least {batch} samples (the model's batch); got {len(x)}")
    return [{name: np.ascontiguousarray(x[i: i + batch])} for i in range(0, len(x) - batch + 1, batch)]
