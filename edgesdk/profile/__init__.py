"""Measuring: latency statistics, per-op profiles on every backend (``Session.profile``), run
profiles with sensors and energy (``profile_session``, also run on boards), reports and traces.

``charts`` (matplotlib) is imported only when a report is drawn: boards have no matplotlib."""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .collect import SCHEMA, profile_session, random_feeds
    from .latency import LatencyStats, measure_latency, time_calls
    from .records import MemoryReport, OpRecord, ProfileReport
    from .report import default_out_dir, write_reports
    from .sensors import PowerSampler, read_environment

# Name -> the submodule defining it, imported on first use (PEP 562): every backend imports
# profile.records, hence this package, and the reports and sensors below (~25 ms of imports) are
# never needed to run a model.
_EXPORTS = {
    "SCHEMA": "collect", "profile_session": "collect", "random_feeds": "collect",
    "LatencyStats": "latency", "measure_latency": "latency", "time_calls": "latency",
    "MemoryReport": "records", "OpRecord": "records", "ProfileReport": "records",
    "default_out_dir": "report", "write_reports": "report",
    "PowerSampler": "sensors", "read_environment": "sensors",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # next time a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


__all__ = ["SCHEMA", "LatencyStats", "MemoryReport", "OpRecord", "PowerSampler", "ProfileReport", "default_out_dir",
           "measure_latency", "profile_session", "random_feeds", "read_environment", "time_calls", "write_reports"]
