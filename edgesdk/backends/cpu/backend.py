"""CPUBackend: the native kernels of ``edgesdk._native`` behind the Backend interface."""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ...errors import BackendUnavailableError, UnsupportedOperatorError
from ...runtime.plan import ExecutionPlan
from ...runtime.precision import PRECISIONS
from ..base import Backend
from ..reference import ReferenceBackend
from .ops import LOWERINGS
from .program import Builder, Slot, Views, aligned_empty, assign_offsets
from .threads import physical_cores


@dataclass(frozen=True)
class StepInfo:
    """What one prepared step does, for ``placements`` / ``describe``."""
    node: str  # graph node ("" for a layout conversion the backend inserted)
    op: str
    placement: str  # native | numpy | view | reference
    note: str


class CPUBackend(Backend):
    """Native SIMD kernels (runtime ISA dispatch), NHWC activations in one arena, weights packed
    once per session. ``threads`` defaults to the physical cores this process may use."""

    name = "cpu"
    precisions = PRECISIONS

    @classmethod
    def unavailable_reason(cls) -> str | None:
        try:
            importlib.import_module("edgesdk._native")
        except ImportError as exc:
            return f"edgesdk._native is not built ({exc}); reinstall with `pip install .` (needs cmake, C++17)"
        return None

    @classmethod
    def supported_ops(cls) -> frozenset[str]:
        return frozenset(LOWERINGS) & ReferenceBackend.supported_ops()

    def __init__(self, plan: ExecutionPlan, *, precision: str = "fp32", threads: int | None = None):
        super().__init__(plan, precision=precision, threads=threads)
        if precision not in PRECISIONS:
            raise BackendUnavailableError(f"cpu backend: precision {precision!r} is not one of {', '.join(PRECISIONS)}")
        self.thread_count = threads if threads is not None else physical_cores()
        from ... import _native
        self.isa: str = _native.kernels.active_isa()
        graph = plan.graph
        builder = Builder(graph, precision, self.thread_count)
        for name in graph.inputs:
            builder.define_input(name)
        for step in plan.steps:
            lower = LOWERINGS.get(step.node.op)
            if lower is None:
                raise UnsupportedOperatorError(step.node.op, step.node.name, sorted(self.supported_ops()))
            lower(step.node, builder)
        outputs = {name: builder.keep_alive(name) for name in graph.outputs}
        self.arena_bytes = assign_offsets(builder.buffers())
        self._arena = aligned_empty(self.arena_bytes)
        views = Views(self._arena)
        self.steps = tuple(StepInfo(s.node, s.op, s.placement, s.note) for s in builder.steps)
        self._runners = [s.binder(views) for s in builder.steps if s.placement != "view"]
        self._inputs = [(name, views[slot]) for name, slot in builder.inputs.items()]
        self._outputs = [(name, _output_reader(views, slot)) for name, slot in outputs.items()]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        for name, buffer in self._inputs:
            np.copyto(buffer, feeds[name])
        for runner in self._runners:
            runner()
        return {name: read() for name, read in self._outputs}

    # -- introspection ----------------------------------------------------------------------------
    @property
    def placements(self) -> dict[str, str]:
        """node name -> native | numpy | view | reference (the reference backend's kernel)."""
        return {s.node: s.placement for s in self.steps if s.node}

    @property
    def fallback_reasons(self) -> dict[str, str]:
        return {s.node: s.note for s in self.steps if s.placement == "reference"}

    def describe(self) -> list[dict[str, str]]:
        """One record per prepared step, conversions included."""
        return [{"node": s.node, "op": s.op, "placement": s.placement, "note": s.note} for s in self.steps]


def _output_reader(views: Views, slot: Slot) -> Callable[[], np.ndarray]:
    """A fresh graph-order copy of an output (the arena is overwritten by the next run)."""
    logical = views.logical(slot)
    return lambda: np.array(logical, order="C", copy=True)
