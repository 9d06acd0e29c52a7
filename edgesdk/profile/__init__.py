"""Measuring: latency statistics now; per-op traces and reports later."""
from .latency import LatencyStats, measure_latency, time_calls

__all__ = ["LatencyStats", "measure_latency", "time_calls"]
