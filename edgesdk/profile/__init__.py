"""Measuring: latency statistics now; per-op traces and reports later."""
from .latency import LatencyStats, measure_latency

__all__ = ["LatencyStats", "measure_latency"]
