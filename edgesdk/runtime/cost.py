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
    bytes_moved: int = 0  # activations read and written plus weights as stored

    def to_dict(self) -> dict:
        d = asdict(self)
        d["output_shape"] = list(self.output_shape)
        return d


def node_macs(node: Node, graph: Graph) -> int:
    """Multiply-accumulates of one node (the op's ``OpSpec.macs`` rule; 0 for data movement)."""
    from ..ops import OPS
    spec = OPS.get(node.op)
    return spec.macs(node, graph) if spec is not None and spec.macs is not None else 0


def default_bytes_moved(node: Node, graph: Graph) -> int:
    """Memory traffic of a node that reads each input once and writes each output once: run-time
    inputs and outputs at their size, constants as stored (compressed when compressed)."""
    total = 0
    for name in node.inputs:
        if name:
            tensor = graph.tensors[name]
            total += tensor.stored_nbytes if tensor.is_constant else math.prod(tensor.shape) * tensor.dtype.itemsize
    for name in node.outputs:
        if name:
            tensor = graph.tensors[name]
            total += math.prod(tensor.shape) * tensor.dtype.itemsize
    return total


def node_bytes_moved(node: Node, graph: Graph) -> int:
    """Bytes one node moves (the op's ``OpSpec.bytes_moved`` rule, else :func:`default_bytes_moved`);
    with :func:`node_macs` it gives the arithmetic intensity that says whether a layer is bound
    by compute or by memory."""
    from ..ops import OPS
    spec = OPS.get(node.op)
    rule = spec.bytes_moved if spec is not None and spec.bytes_moved is not None else default_bytes_moved
    return rule(node, graph)


def node_params(node: Node, graph: Graph) -> int:
    # math.prod, not Tensor.size: Python ints cannot wrap, whatever shape a model declares
    return sum(math.prod(graph.tensors[i].shape) for i in node.inputs if i and graph.tensors[i].is_constant)


def op_label(node: Node) -> str:
    fused = node.attrs.get("fused_activation")
    return f"{node.op}+{fused}" if fused is not None else node.op


def layer_costs(graph: Graph) -> list[LayerCost]:
    return [LayerCost(n.name, op_label(n), graph.tensors[n.outputs[0]].shape,
                      node_params(n, graph), node_macs(n, graph), node_bytes_moved(n, graph)) for n in graph.nodes]
