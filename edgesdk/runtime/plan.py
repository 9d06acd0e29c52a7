"""Execution planning shared by all backends: step order, tensor lifetimes and the size checks
that keep a backend from allocating what this machine cannot hold."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import ModelTooLargeError
from ..graph import Graph, Node
from .shapes import SizeLimit, check_graph_sizes, format_bytes, tensor_nbytes


@dataclass(frozen=True)
class Step:
    node: Node
    release: tuple[str, ...]  # activations whose last reader is this step


@dataclass(frozen=True)
class ExecutionPlan:
    graph: Graph
    steps: tuple[Step, ...]
    peak_activation_bytes: int  # live activations at the worst step, graph inputs included


def make_plan(graph: Graph) -> ExecutionPlan:
    """Order is the graph's (topological); each activation is released after its last use.

    Every backend is built from a plan, so this is where sizes are checked whatever made the
    graph (ONNX import, a package, passes, a hand-built Graph): each tensor, node attribute and
    scratch buffer, then the peak of live activations (what the arena holds), all from shapes,
    raising ModelTooLargeError before anything is allocated."""
    limit = check_graph_sizes(graph)
    keep = set(graph.outputs)
    last_use: dict[str, int] = {}
    for index, node in enumerate(graph.nodes):
        for name in node.inputs:
            if name and not graph.tensors[name].is_constant:
                last_use[name] = index
    releases: dict[int, list[str]] = {}
    for name, index in last_use.items():
        if name not in keep:
            releases.setdefault(index, []).append(name)
    steps = tuple(Step(node, tuple(sorted(releases.get(i, ())))) for i, node in enumerate(graph.nodes))
    peak, peak_step = _peak_bytes(graph, steps)
    if peak > limit.nbytes:
        raise _peak_error(graph, steps, peak, peak_step, limit)
    return ExecutionPlan(graph, steps, peak)


def _nbytes(graph: Graph, name: str) -> int:
    tensor = graph.tensors[name]
    return tensor_nbytes(tensor.shape, tensor.dtype)  # exact: Tensor.nbytes wraps past int64


def _live_after(graph: Graph, steps: tuple[Step, ...], last: int) -> set[str]:
    """Activations live once step ``last`` has written its outputs (before its releases)."""
    live = set(graph.inputs)
    for index, step in enumerate(steps[:last + 1]):
        live.update(o for o in step.node.outputs if o)
        if index < last:
            live.difference_update(step.release)
    return live


def _peak_bytes(graph: Graph, steps: tuple[Step, ...]) -> tuple[int, int]:
    """The most bytes of activations live at once, and the step where (-1: the inputs alone)."""
    live = sum(_nbytes(graph, name) for name in graph.inputs)
    peak, peak_step = live, -1
    for index, step in enumerate(steps):
        live += sum(_nbytes(graph, o) for o in step.node.outputs if o)
        if live > peak:
            peak, peak_step = live, index
        live -= sum(_nbytes(graph, name) for name in step.release)
    return peak, peak_step


def _peak_error(graph: Graph, steps: tuple[Step, ...], peak: int, peak_step: int,
                limit: SizeLimit) -> ModelTooLargeError:
    live = _live_after(graph, steps, peak_step) if peak_step >= 0 else set(graph.inputs)
    largest = max(live, key=lambda name: _nbytes(graph, name))
    tensor = graph.tensors[largest]
    where = (f"at node {steps[peak_step].node.name!r} ({steps[peak_step].node.op})" if peak_step >= 0
             else "for the inputs")
    return ModelTooLargeError(
        f"graph {graph.name!r}: the activations live at once {where} would need {format_bytes(peak)}, "
        f"more than {limit.describe()} (largest: {largest!r} of shape {'x'.join(map(str, tensor.shape))} "
        f"{tensor.dtype}, {format_bytes(_nbytes(graph, largest))}); pass smaller input_shapes=... "
        f"(CLI: --input-shape NAME=...) or use a machine with more memory",
        tensor=largest, nbytes=peak, limit=limit.nbytes)
