"""Apply a recipe to a Graph: every Conv/Gemm weight gets the encoding its settings ask for.

Runs after the graph passes (BatchNorm must be folded before clustering, or the folded scales
would break the codebooks). The graph keeps computing the same function up to the compression
error: encoded tensors decode to exactly the values the compressed model uses.
"""
from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Callable, Literal

import numpy as np

from ..graph import Graph, Node
from .encode import (encode_clustered, encode_fp16, encode_huffman, encode_lq, encode_nnm, encode_sparse,
                     magnitude_threshold, prune_mask)
from .encodings import Clustered, Encoding, SparseCSR
from .recipe import LayerSettings, Recipe, RecipeError

Progress = Callable[[int, int, str], None]
# What to do with a recipe pattern that matches no layer: a warning (default), a RecipeError, nothing.
Unmatched = Literal["warn", "error", "ignore"]
UNMATCHED = ("warn", "error", "ignore")
_log = logging.getLogger("edgesdk.compress")
# What a Huffman-coded layer adds to a package beyond its arrays: the encoding's parameter and
# array entries in the graph section and the blobs' alignment (measured on the digits model: a
# layer that saved 52 bytes of arrays made the package 71 bytes larger).
HUFFMAN_PACKAGE_BYTES = 160


@dataclass(frozen=True)
class LayerReport:
    """What compression did to one layer's weights: encoding, sizes and relative RMS error."""
    name: str  # node name
    weight: str  # tensor name
    op: str
    encoding: str
    params: int
    bytes_before: int  # dense fp32
    bytes_after: int
    error_rms: float  # RMS of (decoded - original) / RMS(original)
    bytes_before_huffman: int | None = None  # huffman layers: the stored bytes of the encoding it codes

    @property
    def ratio(self) -> float:
        """Dense fp32 bytes over stored bytes."""
        return self.bytes_before / max(1, self.bytes_after)

    def to_dict(self) -> dict:
        """All fields and the ratio, JSON-able."""
        return {**asdict(self), "ratio": self.ratio}

    def summary(self) -> dict:
        """The record a package stores per layer: what its graph cannot tell (the encoding and
        the stored and dense sizes it can, from the tensors themselves)."""
        record = {"name": self.name, "error_rms": float(f"{self.error_rms:.4g}")}
        if self.bytes_before_huffman is not None:
            record["bytes_before_huffman"] = self.bytes_before_huffman
        return record


def compressible_layers(graph: Graph) -> list[tuple[Node, str]]:
    """(node, weight tensor) for every Conv and Gemm with a constant weight, each weight once."""
    seen, layers = set(), []
    for node in graph.nodes:  # ConvTranspose weights stay dense on purpose: its kernels read dense weights only
        if node.op in ("Conv", "Gemm") and graph.tensors[node.inputs[1]].is_constant and node.inputs[1] not in seen:
            seen.add(node.inputs[1])
            layers.append((node, node.inputs[1]))
    return layers


def _weights_out_in(graph: Graph, node: Node, name: str) -> str:
    """Gemm weights are stored (out, in) so rows are output channels, as for Conv."""
    if node.op != "Gemm" or node.attrs["transB"]:
        return name
    users = [n for n in graph.nodes if name in n.inputs]
    if len(users) > 1:
        return name  # shared with another op: leave its layout alone
    transposed = graph.unique_name(f"{name}.T")
    graph.add_constant(transposed, np.ascontiguousarray(graph.const(name).T))
    node.inputs[1] = transposed
    node.attrs["transB"] = True
    return transposed


def check_patterns(recipe: Recipe, layers: list[tuple[Node, str]], model: str,
                   unmatched: Unmatched = "warn") -> list[str]:
    """The recipe patterns that match none of ``layers`` ((node, weight name) as
    :meth:`Recipe.settings_for` sees them) of the graph called ``model``: each logged as a warning
    (``unmatched="warn"``), or one RecipeError naming them all (``"error"``), or nothing
    (``"ignore"``). Returns them."""
    if unmatched not in UNMATCHED:
        raise ValueError(f"unmatched must be one of {', '.join(UNMATCHED)}, got {unmatched!r}")
    missing = recipe.unmatched_patterns([(node.name, name) for node, name in layers])
    if not missing or unmatched == "ignore":
        return missing
    known = ", ".join(node.name for node, _ in layers[:6]) + (", ..." if len(layers) > 6 else "")
    where = f"its Conv/Gemm layers: {known}" if layers else "it has no Conv/Gemm layer with constant weights"
    if unmatched == "error":
        plural = len(missing) > 1
        raise RecipeError(f"recipe pattern{'s' if plural else ''} {', '.join(map(repr, missing))} "
                          f"match{'' if plural else 'es'} no layer of {model!r} ({where}; patterns are "
                          "shell-style, e.g. '*fc*')")
    for pattern in missing:
        _log.warning("recipe pattern %r matches no layer of %r (%s)", pattern, model, where)
    return missing


def compress(graph: Graph, recipe: Recipe, *, seed: int = 0, progress: Progress | None = None,
             unmatched: Unmatched = "warn") -> list[LayerReport]:
    """Encode the weights of ``graph`` in place following ``recipe``; returns one report per layer.
    A recipe pattern that matches no layer is reported as :func:`check_patterns` says
    (``unmatched``: "warn", "error" or "ignore"), before anything is encoded."""
    layers = [(node, _weights_out_in(graph, node, name)) for node, name in compressible_layers(graph)]
    check_patterns(recipe, layers, graph.name, unmatched)
    plan = [(node, name, _effective(recipe, node, name, graph)) for node, name in layers]
    threshold = _global_threshold(graph, plan, recipe.global_prune)
    reports = []
    for i, (node, name, settings) in enumerate(plan):
        if progress:
            progress(i, len(plan), node.name)
        weights = graph.const(name).astype(np.float32)
        encoding = _encode(weights, settings, threshold, seed) if settings.compresses else None
        uncoded = None
        if encoding is not None and settings.huffman and _huffman_codes(encoding):
            coded = encode_huffman(encoding)
            # kept where it pays for its tables, block offsets and the package's entries for them
            if coded.nbytes + HUFFMAN_PACKAGE_BYTES < encoding.nbytes:
                uncoded, encoding = encoding.nbytes, coded
        if encoding is not None and encoding.kind != "nnm" and encoding.nbytes >= weights.nbytes:
            # Never grow a layer (tiny layers with per-channel codebooks would): store the values
            # it would decode to, dense.
            graph.tensors[name].data = encoding.decode()
            reports.append(_report(node, name, weights, encoding, kept_dense=True))
            continue
        if encoding is not None:
            graph.add_encoded(name, encoding)
        if settings.fp16 and not settings.skip:
            _bias_to_fp16(graph, node)
        reports.append(_report(node, name, weights, encoding, bytes_before_huffman=uncoded))
    if progress:
        progress(len(plan), len(plan), "")
    graph.remove_unused_tensors()
    graph.metadata["compression"] = {"recipe": recipe.to_dict(), "layers": [r.to_dict() for r in reports]}
    return reports


def _bias_to_fp16(graph: Graph, node: Node) -> None:
    bias = graph.tensors.get(node.input(2) or "")
    if bias is not None and bias.is_constant and bias.encoding is None and bias.dtype == np.float32:
        graph.add_encoded(bias.name, encode_fp16(bias.data))


def _effective(recipe: Recipe, node: Node, name: str, graph: Graph) -> LayerSettings:
    settings = recipe.settings_for(node.name, name)
    weights = graph.tensors[name]
    if weights.size < recipe.min_params:
        return LayerSettings(skip=True)
    depthwise = node.op == "Conv" and node.attrs["group"] > 1
    if settings.nnm_rate is not None and (depthwise or (settings.nnm_mode == "per_input_channel" and node.op != "Conv")):
        # Clustering filters of a grouped conv removes no work, and per-input-channel NNM needs
        # spatial filters: such layers keep their other settings without NNM.
        return LayerSettings(**{**asdict(settings), "nnm_rate": None})
    return settings


def _global_threshold(graph: Graph, plan, global_prune: float | None) -> float | None:
    if global_prune is None:
        return None
    pool = [np.abs(graph.const(name)).reshape(-1) for _, name, s in plan if s.compresses and s.nnm_rate is None]
    return magnitude_threshold(np.concatenate(pool), global_prune) if pool else None


def _encode(w: np.ndarray, s: LayerSettings, global_threshold: float | None, seed: int) -> Encoding:
    if s.lq_bits is not None:
        return encode_lq(w, s.lq_bits)
    if s.nnm_rate is not None:
        return encode_nnm(w, s.nnm_rate, mode=s.nnm_mode, fp16=s.fp16, init="kmeans++", seed=seed)
    prunes = global_threshold is not None or s.prune > 0
    if prunes:
        keep = prune_mask(w, s.prune, global_threshold)
        options = [encode_sparse(w, keep, bits=s.cluster_bits, per_channel=s.per_channel, init=s.init,
                                 fp16=s.fp16, seed=seed)]
        if s.cluster_bits:  # at low sparsity a dense index stream beats CSR: keep the smaller
            options.append(encode_clustered(w, s.cluster_bits, per_channel=s.per_channel, init=s.init,
                                            keep=keep, fp16=s.fp16, seed=seed))
        return min(options, key=lambda e: e.nbytes)
    if s.cluster_bits:
        return encode_clustered(w, s.cluster_bits, per_channel=s.per_channel, init=s.init, fp16=s.fp16, seed=seed)
    return encode_fp16(w)


def _huffman_codes(encoding: Encoding) -> bool:
    """Whether Huffman coding applies: clustered indices, or a float CSR's gaps (and indices)."""
    return isinstance(encoding, Clustered) or (isinstance(encoding, SparseCSR) and encoding.dtype == np.float32)


def _report(node: Node, name: str, w: np.ndarray, encoding: Encoding | None, kept_dense: bool = False,
            bytes_before_huffman: int | None = None) -> LayerReport:
    if encoding is None:
        return LayerReport(node.name, name, node.op, "dense-fp32", w.size, w.nbytes, w.nbytes, 0.0)
    decoded = encoding.decode()
    rms = float(np.sqrt(np.mean(w.astype(np.float64) ** 2))) or 1.0
    error = float(np.sqrt(np.mean((decoded.astype(np.float64) - w) ** 2))) / rms
    if kept_dense:
        label = f"dense-fp32 ({encoding.describe()} would take {encoding.nbytes} B)"
        return LayerReport(node.name, name, node.op, label, w.size, w.nbytes, w.nbytes, error)
    return LayerReport(node.name, name, node.op, encoding.describe(), w.size, w.nbytes, encoding.nbytes, error,
                       bytes_before_huffman)
