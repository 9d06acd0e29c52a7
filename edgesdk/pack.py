"""ONNX -> Graph -> compress -> .edgepkg, the workflow behind ``edgesdk pack`` and ``quickstart``.

Public through :mod:`edgesdk.compress`::

    from edgesdk.compress import Recipe, LayerSettings, pack_model
    result = pack_model("model.onnx", "model.edgepkg", Recipe(LayerSettings(cluster_bits=4)))
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Union

from .compress.apply import LayerReport, Unmatched, compress
from .compress.lq_layers import activation_layers, calibrate_activations
from .compress.recipe import Recipe
from .datasets import Dataset
from .errors import EdgeSDKError, InputError, PackageError
from .graph import Graph
from .loader import load_model
from .passes import optimize

if TYPE_CHECKING:
    import onnx

Progress = Callable[[int, int, str], None]
# What compress_model and pack_model take as a model: a path to an .onnx or .edgepkg file (recognised
# by content), an in-memory ONNX model, or a Graph (never modified: a copy is compressed).
ModelSource = Union[str, os.PathLike, "onnx.ModelProto", Graph]


class AccuracyDropError(EdgeSDKError):
    """The compressed model lost more accuracy than ``max_drop`` allows; nothing was written.
    ``drop_pp`` and ``max_drop_pp`` are in percentage points; ``hint`` says what to try."""

    def __init__(self, *, dataset: str, baseline: float, accuracy: float, max_drop_pp: float, output: str,
                 hint: str = "try a gentler recipe (less pruning, more cluster bits) or fine-tuning") -> None:
        self.dataset, self.baseline, self.accuracy = dataset, baseline, accuracy
        self.drop_pp, self.max_drop_pp, self.output, self.hint = 100 * (baseline - accuracy), max_drop_pp, output, hint
        super().__init__(f"accuracy on {dataset} fell by {self.drop_pp:.2f} pp ({100 * baseline:.2f}% -> "
                         f"{100 * accuracy:.2f}%), more than the {max_drop_pp:g} pp allowed: {output} not written; "
                         f"{hint}")

    def with_hint(self, hint: str) -> "AccuracyDropError":
        """The same refusal with another suggestion (the CLI names its own flags)."""
        return AccuracyDropError(dataset=self.dataset, baseline=self.baseline, accuracy=self.accuracy,
                                 max_drop_pp=self.max_drop_pp, output=self.output, hint=hint)


@dataclass(frozen=True)
class PackResult:
    """What :func:`pack_model` wrote: sizes, per-layer compression reports and accuracies."""
    source: str  # the model's path, or a description of an in-memory model
    output: str
    source_bytes: int  # the ONNX file (an in-memory ONNX model: its serialised size; a Graph: its dense weights)
    package_bytes: int
    layers: list[LayerReport]
    accuracy: float | None
    baseline_accuracy: float | None
    dataset: str | None
    float_fallback: dict | None = None  # what --min-sqnr kept in float and measured
    recipe: dict | None = None  # the recipe stored in the package (Recipe.to_dict), --min-sqnr's choice included

    @property
    def ratio(self) -> float:
        """How many times smaller the package is than the source."""
        return self.source_bytes / max(1, self.package_bytes)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able summary (what ``edgesdk pack --json`` prints)."""
        return {"source": self.source, "output": self.output, "source_bytes": self.source_bytes,
                "package_bytes": self.package_bytes, "ratio": self.ratio, "accuracy": self.accuracy,
                "baseline_accuracy": self.baseline_accuracy, "dataset": self.dataset,
                "layers": [r.to_dict() for r in self.layers],
                **({"float_fallback": self.float_fallback} if self.float_fallback is not None else {})}


def compress_model(source: ModelSource, recipe: Recipe | None = None, *, input_shapes=None,
                   outputs: list[str] | None = None, progress: Progress | None = None, unmatched: Unmatched = "warn"
                   ) -> tuple[Graph, list[LayerReport]]:
    """Load ``source``, run the graph passes (BatchNorm folds before clustering), then compress the
    Conv and Gemm weights as ``recipe`` says (default: ``Recipe()``, which stores them dense).

    ``source`` is a path (.onnx or .edgepkg), an ``onnx.ModelProto`` or a :class:`Graph` (left
    unmodified); ``input_shapes`` fixes dynamic input dimensions of ONNX models
    (``{"input": (1, 3, 224, 224)}``); ``outputs`` cuts the graph at these tensors; ``progress(done, total, layer_name)`` is called per layer;
    ``unmatched`` says what a recipe pattern matching no layer gives ("warn", "error", "ignore").
    Returns the compressed graph (ready for ``Session`` or ``save_package``) and one
    :class:`LayerReport` per compressible layer."""
    graph = load_model(source, input_shapes, outputs)
    optimize(graph)
    return graph, compress(graph, recipe if recipe is not None else Recipe(), progress=progress,
                           unmatched=unmatched)


def pack_model(source: ModelSource, output: str | os.PathLike, recipe: Recipe | None = None, *,
               data: Dataset | None = None, input_shapes=None, outputs: list[str] | None = None,
               graph: Graph | None = None,
               progress: Progress | None = None, max_drop: float | None = None,
               unmatched: Unmatched = "warn", calibration=None, calibration_method: str | None = None,
               min_sqnr: float | None = None) -> PackResult:
    """Compress ``source`` with ``recipe`` and write the .edgepkg package ``output``.

    ``source`` is a path (.onnx or .edgepkg), an ``onnx.ModelProto`` or a :class:`Graph`. With
    ``data`` (a :class:`edgesdk.datasets.Dataset`), top-1 accuracy is measured before and after
    compression and stored in the package; with ``max_drop`` (percentage points, needs ``data``)
    a compressed model whose accuracy fell by more raises :class:`AccuracyDropError` and nothing is
    written. ``graph`` passes a graph already compressed from ``source`` (e.g. by fine-tuning)
    instead of compressing here; ``progress(done, total, stage)`` reports compression,
    evaluation and writing; ``input_shapes``, ``outputs`` and ``unmatched`` as for :func:`compress_model`.
    ``calibration`` (an array of N input samples) quantizes to int8 after compression
    (``edgesdk.quant.ptq.quantize_graph``, ranges by ``calibration_method``: minmax, percentile or
    mse; default the recipe's ``calibration`` entry, else minmax; its ``weight_bits``, 8 or 7, sets the
    weights' range, see ``edgesdk.quant.ptq.weight_qmax``): the layers whose recipe settings
    say ``int8`` (mixed precision), or the whole model when no layer does; nodes named by its
    ``keep_float`` stay float. ``min_sqnr`` (dB) keeps float the tensors that cost most until the
    int8 model's SQNR against fp32 reaches it, on ``data``'s inputs (else the calibration samples;
    ``edgesdk.quant.float_fallback``), and records the nodes in the stored recipe's ``keep_float``, so
    packing with that recipe gives the same bytes without searching again. A recipe with int8
    layers needs ``calibration``. The package is written atomically (temp file + rename)."""
    from .package import save_package

    _check_pack_arguments(source, output, data, max_drop)
    recipe = recipe if recipe is not None else Recipe()
    if graph is None:
        graph, reports = compress_model(source, recipe, input_shapes=input_shapes, outputs=outputs,
                                        progress=progress, unmatched=unmatched)
    else:
        reports = [LayerReport(**{k: v for k, v in r.items() if k != "ratio"})
                   for r in graph.metadata.get("compression", {}).get("layers", [])]
    int8_layers = _int8_layers(graph, recipe)
    lq_layers = activation_layers(graph, recipe)
    if lq_layers and calibration is None:
        raise InputError(f"the recipe quantizes the inputs of {len(lq_layers)} LQ layer(s) "
                         f"({', '.join(sorted(n.name for n, _ in lq_layers)[:3])}{', ...' if len(lq_layers) > 3 else ''}): "
                         "give calibration inputs (--calib DATA), or fine-tune them (edgesdk finetune --recipe lq-2w2a)")
    if lq_layers:
        calibrate_activations(graph, lq_layers, calibration, progress=progress)
    if int8_layers and calibration is None:
        raise InputError(f"the recipe runs {len(int8_layers)} layer(s) in int8 ({', '.join(sorted(int8_layers)[:3])}"
                         f"{', ...' if len(int8_layers) > 3 else ''}): give calibration inputs (--calib DATA)")
    if min_sqnr is not None and calibration is None:
        raise InputError("--min-sqnr chooses which tensors of an int8 model stay float: add --int8 --calib DATA")
    fallback = None
    if calibration is not None and (int8_layers or not _lq_layers(graph)):
        from .quant.ptq import quantize_graph
        float_graph = graph
        settings = recipe.calibration or {}
        method = calibration_method or settings.get("method", "minmax")
        samples = calibration[: settings["samples"]] if "samples" in settings else calibration
        whole = not int8_layers or recipe.default.quantizes and len(int8_layers) == len(_layer_names(graph))
        keep = _keep_float(float_graph, settings.get("keep_float", []))
        graph, report = quantize_graph(float_graph, samples, method=method, progress=progress, skip=keep,
                                       layers=None if whole else int8_layers, weight_bits=settings.get("weight_bits", 8),
                                       min_sqnr=min_sqnr, eval_inputs=None if data is None else data.x)
        fallback = report.float_fallback
        if fallback is not None:  # the stored recipe reproduces the choice without searching
            recipe = dataclasses.replace(recipe, calibration={
                **settings, "keep_float": sorted(keep | set(fallback["keep_float"]))})
        reports = _int8_reports(graph, float_graph, reports)
        from .quant.encode import encode_int8_weights
        reports = encode_int8_weights(graph, reports)  # int8 CSR where the zeros make it smaller
    label, source_bytes, source_sha256 = _describe_source(source)
    accuracy = baseline = None
    if data is not None:
        baseline, accuracy = _accuracies(source, graph, data, input_shapes, outputs, progress)
        if max_drop is not None and 100 * (baseline - accuracy) > max_drop + 1e-9:
            raise AccuracyDropError(dataset=data.name, baseline=baseline, accuracy=accuracy, max_drop_pp=max_drop,
                                    output=str(output))
    metadata = {"source_sha256": source_sha256, "recipe": recipe.to_json(),
                "layers": [r.summary() for r in reports]}
    # The recipe and per-layer stats travel once, as package metadata; the graph keeps the rest.
    # Accuracies stored to 6 significant digits: a count over at most a million samples needs no
    # more, and the 17-digit float repr would be the largest field of a small package's metadata.
    graph.metadata["compression"] = {"baseline_accuracy": _six_digits(baseline)}
    if accuracy is not None:
        metadata.update(accuracy=_six_digits(accuracy), accuracy_dataset=data.name)
    save_package(graph, output, metadata=metadata,
                 progress=(lambda done, total: progress(done, total, "writing")) if progress else None)
    return PackResult(label, str(output), source_bytes, Path(output).stat().st_size,
                      reports, accuracy, baseline, data.name if data is not None else None, fallback,
                      recipe.to_dict())


def _keep_float(graph: Graph, names: list[str]) -> set[str]:
    """A recipe's ``keep_float`` nodes, each checked to name a node of ``graph`` (or a fused
    activation split off one: ``conv.relu``), else a RecipeError saying which."""
    known = {n.name for n in graph.nodes}
    unknown = [n for n in names if n not in known and n.rsplit(".", 1)[0] not in known]
    if unknown:
        from .compress.recipe import RecipeError
        raise RecipeError(f"calibration.keep_float names {len(unknown)} node(s) this model does not have "
                          f"({', '.join(unknown[:3])}{', ...' if len(unknown) > 3 else ''}): the recipe is for another "
                          f"model or export; pack with --min-sqnr DB to choose again")
    return set(names)


def _six_digits(value: float | None) -> float | None:
    return None if value is None else float(f"{value:.6g}")


def _layer_names(graph: Graph) -> dict[str, tuple[str, str]]:
    """Node name -> (node name, weight name) of every compressible layer, as recipes match them."""
    from .compress.apply import compressible_layers
    return {node.name: (node.name, weight) for node, weight in compressible_layers(graph)}


def _lq_layers(graph: Graph) -> bool:
    """Whether the graph has binary-coded (LQ) layers: calibration data then served them, and
    does not also mean "quantize the whole model to int8"."""
    return any(t.encoding is not None and t.encoding.kind == "lq" for t in graph.tensors.values())


def _int8_layers(graph: Graph, recipe: Recipe) -> set[str]:
    """The layers of ``graph`` whose recipe settings say int8."""
    return {name for name, names in _layer_names(graph).items() if recipe.settings_for(*names).quantizes}


def _int8_reports(graph: Graph, float_graph: Graph, reports: list[LayerReport]) -> list[LayerReport]:
    """The per-layer reports of a quantized graph: int8 weights (dense) with their per-channel
    scales, and the relative RMS error against the float weights they came from; layers left
    float keep their compression report."""
    import numpy as np
    float_nodes = {n.name: n for n in float_graph.nodes}
    by_layer = {r.name: r for r in reports}
    quantized = {n.name for n in graph.nodes if n.op in ("QLinearConv", "QGemm", "QLinearMatMul")}
    out = [r for r in reports if r.name not in quantized]
    for node in graph.nodes:
        source = float_nodes.get(node.name)
        if node.op not in ("QLinearConv", "QGemm", "QLinearMatMul") or source is None:
            continue
        weight, scale = graph.tensors[node.inputs[3]], graph.tensors[node.inputs[4]]
        original = float_graph.const(source.inputs[1]).astype(np.float64)
        axis = 1 if node.op == "QLinearMatMul" or (node.op == "QGemm" and not node.attrs["transB"]) else 0
        shape = [1] * original.ndim
        shape[axis] = -1
        decoded = weight.data.astype(np.float64) * scale.data.astype(np.float64).reshape(shape if scale.size > 1 else ())
        rms = float(np.sqrt(np.mean(original ** 2))) or 1.0
        before = by_layer.get(node.name)
        out.append(LayerReport(name=node.name, weight=weight.name, op=node.op, encoding="int8", params=weight.size,
                               bytes_before=before.bytes_before if before else 4 * weight.size,
                               bytes_after=weight.stored_nbytes + scale.stored_nbytes,
                               error_rms=float(np.sqrt(np.mean((decoded - original) ** 2))) / rms))
    order = {node.name: i for i, node in enumerate(graph.nodes)}
    return sorted(out, key=lambda r: order.get(r.name, len(order)))


def _check_pack_arguments(source: ModelSource, output: str | os.PathLike, data: Dataset | None,
                          max_drop: float | None) -> None:
    """Mistakes found before any work: the output is the source, max_drop without data or < 0."""
    if isinstance(source, (str, os.PathLike)) and Path(output).exists() and Path(source).exists() and \
            Path(output).resolve() == Path(source).resolve():
        raise PackageError(f"output {str(output)!r} is the source model; choose another file with -o")
    if max_drop is None:
        return
    if data is None:
        raise InputError("max_drop needs an evaluation dataset (data=...) to measure the accuracy drop against")
    if isinstance(max_drop, bool) or not isinstance(max_drop, (int, float)) or not 0 <= max_drop <= 100:
        raise InputError(f"max_drop must be a number of percentage points in [0, 100], got {max_drop!r}")


def _accuracies(source: ModelSource, graph: Graph, data: Dataset, input_shapes, outputs,
                progress: Progress | None) -> tuple[float, float]:
    """(uncompressed, compressed) top-1 accuracy of ``source`` and ``graph`` on ``data``."""
    from .evaluation import evaluate
    from .runtime.session import Session

    def stage(name: str):
        return (lambda done, total: progress(done, total, name)) if progress else None
    baseline = evaluate(Session(source, input_shapes=input_shapes, outputs=outputs), data, progress=stage("evaluating uncompressed"))
    accuracy = evaluate(Session(graph), data, progress=stage("evaluating compressed")).accuracy
    return baseline.accuracy, accuracy


def _describe_source(source: ModelSource) -> tuple[str, int, str | None]:
    """(label, size in bytes, sha256 or None) of the model a package is built from."""
    from .package import sha256_file
    if isinstance(source, Graph):  # no file: its dense weights are what compression is measured on
        return f"<Graph {source.name!r}>", sum(t.nbytes for t in source.constants()), None
    if isinstance(source, (str, os.PathLike)):
        return str(source), Path(source).stat().st_size, sha256_file(source)
    serialized = source.SerializeToString()  # an onnx.ModelProto (load_model accepted it)
    return (f"<onnx.ModelProto {source.graph.name!r}>", len(serialized),
            hashlib.sha256(serialized).hexdigest())
