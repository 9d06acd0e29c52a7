"""The interface every backend implements; the runtime knows nothing else about backends."""
from __future__ import annotations

import abc
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from ..errors import BackendUnavailableError
from ..runtime.plan import ExecutionPlan

if TYPE_CHECKING:
    from ..profile.records import ProfileReport


class Backend(abc.ABC):
    """Executes a planned graph. One instance per Session; it may prepare weights up front."""

    name: ClassVar[str]
    precisions: ClassVar[tuple[str, ...]] = ("fp32",)

    @classmethod
    def unavailable_reason(cls) -> str | None:
        """None when this backend can run on this machine, else a one-line reason and the fix."""
        return None

    @classmethod
    @abc.abstractmethod
    def supported_ops(cls) -> frozenset[str]:
        """Op types this backend has kernels for."""

    def __init__(self, plan: ExecutionPlan, *, precision: str = "fp32", threads: int | None = None):
        self.plan = plan
        self.precision = precision
        self.threads = threads

    @abc.abstractmethod
    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run with validated feeds (name -> array); return every graph output by name."""

    def profile(self, feeds: dict[str, np.ndarray]) -> "ProfileReport":
        """Run once like :meth:`run`, timing every step: per-op records in execution order,
        placements, memory, and the outputs (``report.outputs``). Not abstract, so that a backend
        without a profiler still runs; this default says so."""
        raise BackendUnavailableError(f"backend {self.name!r} has no per-op profiler; the built-in "
                                      f"backends (reference, cpu, opencl) have one")
