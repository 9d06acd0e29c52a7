"""The one profiling loop, and the step descriptions every backend reports placements from.

A backend prepares its run as a list of *runners* (zero-argument callables, one per step that
does something) plus a :class:`StepInfo` per step, views included. ``Backend.run`` calls the
runners in order; ``Backend.profile`` calls the same runners through :func:`timed_runners`, so
the profiled run is the real one with a clock around each step, and :func:`op_records` turns the
times (and a device backend's event times) into the report's records.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..graph import Graph, Node
from ..profile.records import OpRecord
from .cost import op_label

Runner = Callable[[], Any]


@dataclass(frozen=True)
class StepInfo:
    """What one prepared step does: the source of ``placements``, ``fallback_reasons``,
    ``describe()`` and the profile's records.

    ``node`` is the graph node's name, or "" for a step the backend inserted (a layout
    conversion); ``runs`` is False for steps with no runner (views: no kernel, no time)."""
    node: str
    op: str  # the node's op type, or what an inserted step does ("nhwc->nchw")
    placement: str  # native | numpy | opencl | view | reference
    note: str = ""
    label: str = ""  # the op with its fused activation ("Conv+Relu6"), as reports show it
    kernels: tuple[str, ...] = ()
    output_bytes: int = 0
    weight_bytes: int = 0
    scratch_bytes: int = 0
    runs: bool = True

    @classmethod
    def of_node(cls, node: Node, graph: Graph, placement: str, *, note: str = "",
                output_bytes: int | None = None, weight_bytes: int | None = None, **more: Any) -> "StepInfo":
        """Defaults from the graph: the outputs' and the constant inputs' bytes as stored."""
        if output_bytes is None:
            output_bytes = 0 if placement == "view" else sum(graph.tensors[o].nbytes for o in node.outputs if o)
        if weight_bytes is None:
            weight_bytes = sum(graph.tensors[i].stored_nbytes for i in node.inputs
                               if i and graph.tensors[i].is_constant)
        return cls(node.name, node.op, placement, note, label=op_label(node), output_bytes=output_bytes,
                   weight_bytes=weight_bytes, runs=placement != "view", **more)


def timed_runners(runners: Sequence[Runner], settle: Callable[[int], None] | None = None
                  ) -> tuple[list[Runner], list[float], list[Any]]:
    """``runners`` wrapped to record each one's host time (seconds) and return value (a device
    backend's runners return their kernels' events). ``settle(i)``, when given, runs before
    step ``i`` starts its clock: a device backend waits there for the kernels already queued, so
    that a host step is not charged for the device's earlier work."""
    seconds = [0.0] * len(runners)
    results: list[Any] = [None] * len(runners)

    def wrap(index: int, runner: Runner) -> Runner:
        def run() -> None:
            if settle is not None:
                settle(index)
            start = time.perf_counter()
            results[index] = runner()
            seconds[index] = time.perf_counter() - start
        return run
    return [wrap(i, r) for i, r in enumerate(runners)], seconds, results


def op_records(steps: Sequence[StepInfo], host_seconds: Sequence[float],
               device_ms: Sequence[float] | None = None) -> tuple[OpRecord, ...]:
    """One record per step; the times of the steps that ran, in order, are ``host_seconds``
    (and ``device_ms``, for a device backend)."""
    host = iter(host_seconds)
    device = iter(device_ms) if device_ms is not None else None
    records = []
    for step in steps:
        spent = next(host) if step.runs else 0.0
        on_device = next(device) if device is not None and step.runs else 0.0
        records.append(OpRecord(node=step.node or step.note, op=step.label or step.op, placement=step.placement,
                                kernels=step.kernels, device_ms=on_device, host_ms=spent * 1e3,
                                output_bytes=step.output_bytes, weight_bytes=step.weight_bytes,
                                scratch_bytes=step.scratch_bytes, note=step.note))
    return tuple(records)
