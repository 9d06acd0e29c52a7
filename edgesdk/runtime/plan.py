"""Execution planning shared by all backends: step order and tensor lifetimes."""
from __future__ import annotations

from dataclasses import dataclass

from ..graph import Graph, Node


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
    """Order is the graph's (topological); each activation is released after its last use."""
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
    return ExecutionPlan(graph, steps, _peak_bytes(graph, steps))


def _peak_bytes(graph: Graph, steps: tuple[Step, ...]) -> int:
    live = sum(graph.tensors[name].nbytes for name in graph.inputs)
    peak = live
    for step in steps:
        live += sum(graph.tensors[o].nbytes for o in step.node.outputs if o)
        peak = max(peak, live)
        live -= sum(graph.tensors[name].nbytes for name in step.release)
    return peak
