"""Graph passes: constant folding, view cleanup, BatchNorm folding, activation fusion, dead code.

Each pass rewrites the graph in place and returns how many rewrites it made. ``optimize`` runs
them in the order that lets each feed the next (BN must fold before its conv takes a ReLU).
"""
from __future__ import annotations

import numpy as np

from .graph import Graph, Node
from .ops import OPS, evaluate
from .runtime.activations import ACTIVATION_PARAMS
from .runtime.shapes import check_folding

# Ops whose kernels apply a fused activation to their output in every backend (``OpSpec.fusable``).
FUSABLE_PRODUCERS = frozenset(name for name, spec in OPS.items() if spec.fusable)


def optimize(graph: Graph) -> dict[str, int]:
    """Run every pass; returns rewrites per pass (for ``inspect`` and logs)."""
    stats = {
        "fold_constants": fold_constants(graph),
        "remove_noop_views": remove_noop_views(graph),
        "fold_batchnorm": fold_batchnorm(graph),
        "fuse_activations": fuse_activations(graph),
    }
    stats["eliminate_dead_nodes"] = eliminate_dead_nodes(graph)
    return stats


def fold_constants(graph: Graph) -> int:
    """Evaluate every node whose inputs are all constant and keep its outputs as constants."""
    folded = 0
    remaining: list[Node] = []
    for node in graph.nodes:
        # check before reading values: graph.const decodes a compressed weight, and a Conv with
        # a clustered weight must keep it compressed for the backends that run it that way
        if not all(name in graph.tensors and graph.tensors[name].is_constant for name in node.inputs if name):
            remaining.append(node)
            continue
        values = [graph.const(i) for i in node.inputs]
        check_folding(node, values)  # from shapes, before evaluating allocates the result
        for name, value in zip(node.outputs, evaluate(node, values)):
            if name:
                graph.add_constant(name, np.asarray(value))
        folded += 1
    graph.nodes = remaining
    return folded


def _single_internal_use(graph: Graph, tensor: str, consumers: dict[str, list[Node]]) -> bool:
    return tensor not in graph.outputs and len(consumers.get(tensor, ())) == 1


def _bypass(graph: Graph, node: Node, consumers: dict[str, list[Node]], producers: dict[str, Node]) -> bool:
    """Remove a node whose output equals its input. False when the graph's interface forbids it."""
    src, dst = node.inputs[0], node.outputs[0]
    if dst not in graph.outputs:
        for user in consumers.get(dst, ()):
            user.inputs = [src if i == dst else i for i in user.inputs]
    elif src in producers and src not in graph.outputs:
        # The output name is part of the interface: the producer of src writes it instead.
        producer = producers[src]
        producer.outputs = [dst if o == src else o for o in producer.outputs]
        del graph.tensors[src]
        for user in consumers.get(src, ()):
            user.inputs = [dst if i == src else i for i in user.inputs]
    else:
        return False
    graph.nodes.remove(node)
    return True


def remove_noop_views(graph: Graph) -> int:
    """Drop reshapes to the same shape (Identity, Dropout) and merge chains of reshapes."""
    rewrites = 0
    for node in list(graph.nodes):
        if node.op != "Reshape":
            continue
        consumers, producers = graph.consumers(), graph.producers()
        src = node.inputs[0]
        upstream = producers.get(src)
        if upstream is not None and upstream.op == "Reshape" and _single_internal_use(graph, src, consumers):
            node.inputs = [upstream.inputs[0]]  # reshape(reshape(x)) == reshape(x)
            graph.nodes.remove(upstream)
            rewrites += 1
            src = node.inputs[0]
        if graph.tensors[src].shape == tuple(node.attrs["shape"]):
            rewrites += _bypass(graph, node, graph.consumers(), graph.producers())
    graph.remove_unused_tensors()
    return rewrites


def fold_batchnorm(graph: Graph) -> int:
    """Fold BatchNormalization into the Conv or Gemm that feeds it (weights and bias)."""
    folded = 0
    for bn in [n for n in graph.nodes if n.op == "BatchNormalization"]:
        consumers, producers = graph.consumers(), graph.producers()
        producer = producers.get(bn.inputs[0])
        if (producer is None or producer.op not in ("Conv", "Gemm")
                or "fused_activation" in producer.attrs
                or not _single_internal_use(graph, bn.inputs[0], consumers)):
            continue
        weights = graph.const(producer.inputs[1])
        bias = graph.const(producer.input(2)) if producer.input(2) else None
        if weights is None or (producer.input(2) and bias is None):
            continue
        gamma, beta, mean, var = (graph.const(i) for i in bn.inputs[1:5])
        scale = (gamma / np.sqrt(var + np.float32(bn.attrs["epsilon"]))).astype(np.float32)
        if producer.op == "Conv":
            new_w = weights * scale.reshape(-1, 1, 1, 1)
            new_b = ((0 if bias is None else bias) - mean) * scale + beta
        else:
            new_w = weights * (scale[:, None] if producer.attrs["transB"] else scale[None, :])
            c = 0 if bias is None else bias * np.float32(producer.attrs["beta"])
            new_b = np.broadcast_to((c - mean) * scale + beta, np.broadcast_shapes(np.shape(c), scale.shape))
            producer.attrs["beta"] = 1.0
        w_name = graph.unique_name(f"{producer.name}.weight_bn")
        graph.add_constant(w_name, new_w.astype(np.float32))
        b_name = graph.unique_name(f"{producer.name}.bias_bn")
        graph.add_constant(b_name, np.ascontiguousarray(new_b, dtype=np.float32))
        producer.inputs = [producer.inputs[0], w_name, b_name]
        _absorb(graph, producer, bn)
        folded += 1
    graph.remove_unused_tensors()
    return folded


def fuse_activations(graph: Graph) -> int:
    """Move a stand-alone activation into the op that produces its input."""
    fused = 0
    for act in [n for n in graph.nodes if n.op in ACTIVATION_PARAMS]:
        consumers, producers = graph.consumers(), graph.producers()
        producer = producers.get(act.inputs[0])
        if (producer is None or producer.op not in FUSABLE_PRODUCERS
                or "fused_activation" in producer.attrs
                or not _single_internal_use(graph, act.inputs[0], consumers)):
            continue
        producer.attrs["fused_activation"] = act.attrs["activation"]
        _absorb(graph, producer, act)
        fused += 1
    graph.remove_unused_tensors()
    return fused


def _absorb(graph: Graph, producer: Node, follower: Node) -> None:
    """``producer`` now computes ``follower``'s output; ``follower`` goes away."""
    intermediate = producer.outputs[0]
    producer.outputs[0] = follower.outputs[0]
    graph.nodes.remove(follower)
    del graph.tensors[intermediate]


def eliminate_dead_nodes(graph: Graph) -> int:
    """Remove nodes that no graph output depends on, then unused tensors."""
    needed = set(graph.outputs)
    kept: list[Node] = []
    for node in reversed(graph.nodes):
        if any(o in needed for o in node.outputs if o):
            kept.append(node)
            needed.update(i for i in node.inputs if i)
    removed = len(graph.nodes) - len(kept)
    graph.nodes = kept[::-1]
    graph.remove_unused_tensors()
    return removed
