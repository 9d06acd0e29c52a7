"""LQ layers in a graph: the activation quantizer in front of a binary-coded Conv / Gemm.

An LQ layer with quantized activations is two nodes: ``LQQuantize`` (``edgesdk/ops/lq.py``, the
layer's activation basis) writing the input of the Conv / Gemm whose weights are
:class:`~edgesdk.compress.encodings.LQBinary`. Backends that know the pair run it as one bitwise
product; the rest run both nodes as they stand.

The activation bases come from fine-tuning (``edgesdk.compress.lq_train``) or, when packing with
calibration data, from :func:`calibrate_activations`: QEM on the values each layer's input takes,
one layer at a time in graph order with the layers before it already quantized - the seed's
"uptraining" (§2.7), which lets a layer's basis absorb the error of the layers upstream.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..graph import Graph, Node
from .lq import fit_activation_basis
from .recipe import Recipe

LQ_OPS = ("Conv", "Gemm")
Progress = Callable[[int, int, str], None]


def quantizer_of(graph: Graph, node: Node) -> Node | None:
    """The LQQuantize node writing ``node``'s input 0, if any."""
    producer = graph.producers().get(node.inputs[0])
    return producer if producer is not None and producer.op == "LQQuantize" else None


def bitwise_reader(graph: Graph, quantizer: Node) -> Node | None:
    """The LQ layer a quantizer can be fused into, or None: its output's only reader, reading it
    as input 0 and nowhere else, not a graph output, a Conv (2-D, groups 1) or a Gemm (transB, no
    transA) with constant :class:`~edgesdk.compress.encodings.LQBinary` weights. The one structural
    rule every backend's bitwise product starts from; each adds its kernels' own limits."""
    if quantizer.op != "LQQuantize" or len(quantizer.outputs) != 1:
        return None
    out = quantizer.outputs[0]
    readers = graph.consumers().get(out, [])
    if out in graph.outputs or len(readers) != 1:
        return None
    layer = readers[0]
    if layer.op not in LQ_OPS or len(layer.inputs) < 2 or layer.inputs[0] != out or out in layer.inputs[1:]:
        return None
    weights = graph.tensors.get(layer.inputs[1])
    if weights is None or weights.encoding is None or weights.encoding.kind != "lq":
        return None
    if layer.op == "Conv":
        return layer if layer.attrs["group"] == 1 and len(graph.tensors[out].shape) == 4 else None
    a = layer.attrs
    return layer if a["transB"] and not a.get("transA") and len(graph.tensors[out].shape) == 2 else None


def insert_quantizer(graph: Graph, node: Node, alpha: np.ndarray, offset: float) -> Node:
    """Put an LQQuantize of basis ``alpha`` and ``offset`` in front of ``node``'s input 0 (a new
    tensor, so other readers of the input keep the float values), just before ``node``."""
    source = graph.tensors[node.inputs[0]]
    out = graph.unique_name(f"{node.name}/lq_input")
    graph.add_tensor(out, source.shape, np.float32)
    quantizer = Node("LQQuantize", graph.unique_name(f"{node.name}/LQQuantize"), [source.name], [out],
                     {"basis": tuple(float(v) for v in np.asarray(alpha, np.float32)), "offset": float(np.float32(offset))})
    graph.nodes.insert(graph.nodes.index(node), quantizer)
    node.inputs[0] = out
    return quantizer


def activation_layers(graph: Graph, recipe: Recipe) -> list[tuple[Node, int]]:
    """The Conv / Gemm nodes whose recipe settings quantize their input (``lq_act_bits``), with the
    bits, in graph order; layers that already have their quantizer are left out."""
    from .apply import _weights_out_in, compressible_layers
    out = []
    for node, name in compressible_layers(graph):
        settings = recipe.settings_for(node.name, _weights_out_in(graph, node, name))
        if node.op in LQ_OPS and settings.lq_activations and quantizer_of(graph, node) is None:
            out.append((node, settings.lq_activations))
    return out


def calibrate_activations(graph: Graph, layers: list[tuple[Node, int]], calibration: np.ndarray, *,
                          progress: Progress | None = None, seed: int = 0) -> list[dict]:
    """Insert the quantizer of every layer of ``layers`` (from :func:`activation_layers`), its basis
    fitted by QEM on the layer's inputs over ``calibration`` (N samples of the graph's one input),
    with the quantizers before it in place. Returns one summary per layer (bits, basis, offset,
    rms error relative to the input's rms)."""
    from ..quant.calibrate import calibration_inputs
    from ..runtime.session import Session
    feeds = calibration_inputs(graph, calibration)
    summaries = []
    for i, (node, bits) in enumerate(layers):
        if progress:
            progress(i, len(layers), f"LQ activations {node.name}")
        tensor = node.inputs[0]
        probe = graph.copy()
        probe.outputs = [tensor]
        with Session(probe, backend="auto", optimize=False) as session:
            values = np.concatenate([np.asarray(session.run(feed)[tensor]).reshape(-1) for feed in feeds])
        alpha, offset = fit_activation_basis(values, bits, seed=seed)
        insert_quantizer(graph, node, alpha, offset)
        summaries.append(_summary(node, bits, alpha, offset, values))
    if progress:
        progress(len(layers), len(layers), "LQ activations")
    return summaries


def _summary(node: Node, bits: int, alpha: np.ndarray, offset: float, values: np.ndarray) -> dict:
    from .lq import quantize_activations
    finite = values[np.isfinite(values)].astype(np.float64)
    rms = float(np.sqrt(np.mean(finite ** 2))) if finite.size else 0.0
    error = float(np.sqrt(np.mean((quantize_activations(finite, alpha, offset) - finite) ** 2))) if finite.size else 0.0
    return {"layer": node.name, "bits": bits, "basis": [float(v) for v in alpha], "offset": float(offset),
            "error_rms": error / rms if rms else 0.0}
