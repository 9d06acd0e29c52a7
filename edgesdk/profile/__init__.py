"""Measuring: latency statistics, per-op profiles on every backend (``Session.profile``), run
profiles with sensors and energy (``profile_session``, also run on boards), reports and traces.

``charts`` (matplotlib) is imported only when a report is drawn: boards have no matplotlib."""
from .collect import SCHEMA, profile_session, random_feeds
from .latency import LatencyStats, measure_latency, time_calls
from .records import MemoryReport, OpRecord, ProfileReport
from .report import default_out_dir, write_reports
from .sensors import PowerSampler, read_environment

__all__ = ["SCHEMA", "LatencyStats", "MemoryReport", "OpRecord", "PowerSampler", "ProfileReport", "default_out_dir",
           "measure_latency", "profile_session", "random_feeds", "read_environment", "time_calls", "write_reports"]
