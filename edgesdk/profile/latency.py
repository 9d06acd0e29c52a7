"""Latency measurement following the usual protocol: warm up, then repeat for a minimum time,
report the median with the 20%/80% quantiles (Dukhan's protocol), plus min and p90."""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class LatencyStats:
    runs: int
    median_ms: float
    min_ms: float
    p20_ms: float
    p80_ms: float
    p90_ms: float
    mean_ms: float

    @classmethod
    def from_seconds(cls, samples: list[float] | np.ndarray) -> "LatencyStats":
        ms = np.asarray(samples, dtype=np.float64) * 1e3
        q = np.percentile(ms, [50, 20, 80, 90])
        return cls(len(ms), float(q[0]), float(ms.min()), float(q[1]), float(q[2]), float(q[3]),
                   float(ms.mean()))

    def to_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        return f"{self.median_ms:.3f} ms median (min {self.min_ms:.3f}, p90 {self.p90_ms:.3f}, n={self.runs})"


def time_calls(fn: Callable[[], object], *, warmup: int = 3, min_runs: int = 10,
               min_time_s: float = 1.0, max_runs: int = 10_000) -> list[float]:
    """Seconds per call: ``warmup`` untimed calls, then at least ``min_runs`` calls and ``min_time_s``."""
    for _ in range(warmup):
        fn()
    samples: list[float] = []
    start = time.perf_counter()
    while len(samples) < max_runs and (len(samples) < min_runs or time.perf_counter() - start < min_time_s):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return samples


def measure_latency(fn: Callable[[], object], **options) -> LatencyStats:
    """:func:`time_calls` summarised."""
    return LatencyStats.from_seconds(time_calls(fn, **options))


def format_ms(ms: float | None) -> str:
    """A duration given in milliseconds, to three significant figures or so: "12.3 ms", "0.457 ms",
    "5.8 µs" (per-op times of small layers are microseconds)."""
    if ms is None:
        return "n/a"
    if abs(ms) >= 100:
        return f"{ms:.0f} ms"
    if abs(ms) >= 1:
        return f"{ms:.2f} ms"
    if abs(ms) >= 0.1 or ms == 0:
        return f"{ms:.3f} ms"
    return f"{ms * 1e3:.1f} \u00b5s"
