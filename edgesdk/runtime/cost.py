"""Per-layer parameter and multiply-accumulate counts (what ``inspect`` prints)."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from ..graph import Graph, Node


@dataclass(frozen=True)
class LayerCost:
    name: str
    op: str  # with its fused activation, e.g. "Conv+Relu6"
    output_shape: tuple[int, ...]
    params: int
    macs: int

    def to_dict(self) -> dict:
        d = asdict(self)
        d["output_shape"] = list(self.output_shape)
        return d


def node_macs(node: Node, graph: Graph) -> int:
    out = graph.tensors[node.outputs[0]].shape
    if node.op == "Conv":
        w = graph.tensors[node.inputs[1]].shape
        return math.prod(out) * math.prod(w[1:])
    if node.op == "Gemm":
        a = graph.tensors[node.inputs[0]].shape
        return math.prod(out) * (a[0] if node.attrs["transA"] else a[1])
    if node.op == "MatMul":
        return math.prod(out) * graph.tensors[node.inputs[0]].shape[-1]
    return 0


def node_params(node: Node, graph: Graph) -> int:
    # math.prod, not Tensor.size: Python ints cannot wrap, whatever shape a model declares
    return sum(math.prod(graph.tensors[i].shape) for i in node.inputs if i and graph.tensors[i].is_constant)


def op_label(node: Node) -> str:
    fused = node.attrs.get("fused_activation")
    return f"{node.op}+{fused}" if fused is not None else node.op


def layer_costs(graph: Graph) -> list[LayerCost]:
    return [LayerCost(n.name, op_label(n), graph.tensors[n.outputs[0]].shape,
                      node_params(n, graph), node_macs(n, graph)) for n in graph.nodes]
