"""LQ-Nets training (seed 002, issue 16): fine-tune a graph through its learned binary-coded
quantizers, then write the exact encoding the package stores.

For every Conv / Gemm whose recipe settings have ``lq_bits``:

* :class:`LQWeightQuantizer` holds the float (latent) weight as the trainable parameter and a
  per-output-channel basis ``beta`` (O, K) as a buffer. The forward pass puts every weight on its
  channel's nearest level (:func:`edgesdk.compress.lq.level_table` of the current basis, the tie rule
  of the package) and lets the gradient pass straight through to the float weight. The basis is
  not trained by gradient: in every training step it is refitted by QEM on the current weights
  (``qem_iters`` alternations of nearest-level encoding and ridge least squares, warm-started from
  the current basis) and moved there with a moving average (``momentum``, 0.9), as LQ-Nets does.
* with ``lq_act_bits``, :class:`LQActivationQuantizer` quantizes the layer's input: a per-layer
  basis ``alpha`` (K,) and ``offset`` ({0, 1} bits plus an offset, :func:`~edgesdk.compress.lq.
  activation_levels`), forward = the nearest level, gradient straight through inside the level range
  and zero outside it (the clip), basis (and offset, unless the input is non-negative) refitted by
  QEM on the batch's activations each training step with the same moving average. The offset is
  fixed at 0 when the layer's input is non-negative on the calibration batch (ReLU outputs: zero
  stays exact).

Both start from the numpy QEM of :mod:`edgesdk.compress.lq` (weights: the starting weights;
activations: a calibration batch of the training set, each layer fitted with the quantizers
before it in place). The levels and thresholds of the forward pass are computed by the numpy
functions the package uses, so the module computes with exactly the values the package decodes
to. :func:`lq_finetune_graph` returns the graph with each layer's :class:`~edgesdk.compress.
encodings.LQBinary` (codes = the nearest level of the trained float weights under the final basis)
and an ``LQQuantize`` node in front of every layer with quantized inputs: ``pack_model(...,
graph=that)`` writes it as it stands.

Needs torch, like :mod:`edgesdk.compress.finetune`.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..errors import EdgeSDKError, InputError

try:
    import torch
    from torch import nn
except ImportError:  # pragma: no cover - exercised only without the train extra
    raise EdgeSDKError("fine-tuning needs PyTorch: pip install torch (or, in the edgesdk source checkout, "
                       "pip install -e '.[train]')") from None

from ..datasets import Dataset
from ..graph import Graph, Node
from ..progress import ProgressFactory
from . import lq
from .apply import _effective, _report, _weights_out_in, check_patterns, compressible_layers, Unmatched
from .encode import lq_from_codes, matrix_view
from .finetune import (DEFAULT_BATCH, DEFAULT_DISTILL, DEFAULT_TEMPERATURE, DEFAULT_WEIGHT_DECAY, Log,
                       CompressibleGraphModule, FinetuneConfig, _dataset_batches, _loss_fn,
                       check_trainable, module_accuracy, train)
from .lq_layers import LQ_OPS, insert_quantizer
from .recipe import LayerSettings, Recipe
from .torch_bridge import GraphModule, straight_through, write_back

# Defaults chosen on the default digits model (tools/lq_accuracy.py measures them).
DEFAULT_LQ_EPOCHS = 30  # 15 epochs: 98.61-99.17% at 2w2a; about 10 s per run on one core
DEFAULT_LQ_LR = 3e-3  # as the other fine-tunings; 1e-3 gave 98.89-99.72% at 2w2a (3 seeds), 3e-3 99.17-99.44%
DEFAULT_MOMENTUM = 0.9  # moving average of the QEM basis, per training step (LQ-Nets)
DEFAULT_QEM_ITERS = 2  # encode + least-squares alternations per step
DEFAULT_CALIBRATION = 256  # training samples the activation bases start from
_ACT_SAMPLES = 1 << 18  # activation values one QEM step fits on (a strided subset beyond that)


def uses_lq(recipe: Recipe) -> bool:
    """Whether any entry of ``recipe`` (defaults or a layer's) stores weights as LQ codes."""
    import dataclasses
    if recipe.default.lq_bits is not None:
        return True
    return any(LayerSettings(**{**dataclasses.asdict(recipe.default), **o}).lq_bits is not None
               for _, o in recipe.layers)


# ---------------------------------------------------------------------------------------------
# QEM steps (numpy, float64), warm-started from the current basis
# ---------------------------------------------------------------------------------------------
def qem_weight_step(w: np.ndarray, beta: np.ndarray, iters: int = DEFAULT_QEM_ITERS) -> np.ndarray:
    """``iters`` QEM alternations (:func:`edgesdk.compress.lq.weight_step`) for per-channel weight
    bases from ``beta`` (O, K) on ``w`` (O, N). Returns the new basis (O, K) float64."""
    beta = np.asarray(beta, dtype=np.float64)
    for _ in range(iters):
        beta = lq.weight_step(w, beta)
    return beta


def qem_activation_step(x: np.ndarray, alpha: np.ndarray, offset: float, nonnegative: bool,
                        iters: int = DEFAULT_QEM_ITERS) -> tuple[np.ndarray, float]:
    """``iters`` QEM alternations (:func:`edgesdk.compress.lq.activation_step`) for one layer's
    activation basis on the finite values of ``x``. Returns (alpha sorted, offset)."""
    x = np.asarray(x, dtype=np.float32).reshape(-1)
    x = x[np.isfinite(x)]
    alpha = np.asarray(alpha, dtype=np.float64)
    for _ in range(iters if x.size else 0):
        alpha, offset = lq.activation_step(x, alpha, offset, nonnegative)
    order = np.argsort(alpha, kind="stable")
    return alpha[order], float(offset)


# ---------------------------------------------------------------------------------------------
# The quantizer modules
# ---------------------------------------------------------------------------------------------
def _nearest(x: torch.Tensor, levels: np.ndarray, thresholds: np.ndarray, codes: np.ndarray) -> torch.Tensor:
    """Each value of ``x`` on its nearest level (the package's tables, so exactly its values):
    one table (1-D) for all of ``x``, or one per row of a 2-D ``x``."""
    if thresholds.ndim == 1:
        ordered = torch.from_numpy(np.ascontiguousarray(levels[codes]))
        index = torch.bucketize(x, torch.from_numpy(np.ascontiguousarray(thresholds)), right=False)
        return ordered[index]
    ordered = torch.from_numpy(np.ascontiguousarray(np.take_along_axis(levels, codes.astype(np.int64), axis=1)))
    bounds = torch.from_numpy(np.ascontiguousarray(thresholds))
    index = torch.zeros(x.shape, dtype=torch.int64)
    for t in range(bounds.shape[1]):  # 2^K - 1 passes over the matrix (as encode_nearest), no (O, N, 2^K) temporary
        index += x > bounds[:, t: t + 1]
    return torch.gather(ordered, 1, index)


class LQWeightQuantizer(nn.Module):
    """One layer's binary-coded weight: ``weight`` (the float latent weight, any shape with output
    channels first) and ``basis`` (O, K) float32 ascending. ``forward()`` returns the weight on its
    channels' nearest levels with a straight-through gradient; in training mode it first refits the
    basis by QEM on the current weight (moving average ``momentum``)."""

    def __init__(self, weight: np.ndarray, bits: int, *, momentum: float = DEFAULT_MOMENTUM,
                 qem_iters: int = DEFAULT_QEM_ITERS, basis: np.ndarray | None = None) -> None:
        super().__init__()
        w = np.asarray(weight, dtype=np.float32)
        self.weight = nn.Parameter(torch.from_numpy(w.copy()))
        if basis is None:
            basis, _ = lq.fit_weight_basis(matrix_view(w), bits)
        self.register_buffer("basis", torch.from_numpy(np.asarray(basis, dtype=np.float32).copy()))
        self.bits, self.momentum, self.qem_iters = bits, momentum, qem_iters

    def _matrix(self) -> np.ndarray:
        return self.weight.detach().cpu().numpy().reshape(self.weight.shape[0], -1)

    @torch.no_grad()
    def update_basis(self) -> None:
        """One training step's QEM refit with the moving average."""
        fitted = qem_weight_step(self._matrix(), self.basis.numpy(), self.qem_iters)
        mixed = self.momentum * self.basis.numpy().astype(np.float64) + (1 - self.momentum) * fitted
        self.basis.copy_(torch.from_numpy(np.sort(mixed, axis=1).astype(np.float32)))

    def tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(levels (O, 2^K) in code order, thresholds, codes) of the current basis."""
        levels = lq.weight_levels(self.basis.numpy())
        thresholds, codes = lq.level_table(levels)
        return levels, thresholds, codes

    def quantized(self) -> torch.Tensor:
        """The weight on its nearest levels (no gradient)."""
        w = self.weight.detach()
        return _nearest(w.reshape(w.shape[0], -1), *self.tables()).reshape(w.shape)

    def forward(self) -> torch.Tensor:
        if self.training:
            self.update_basis()
        return straight_through(self.weight, self.quantized())

    def encoding(self):
        """The :class:`~edgesdk.compress.encodings.LQBinary` of the current float weight and basis:
        every weight the code of its nearest level (the package's encoder)."""
        _, thresholds, codes = self.tables()
        code = lq.encode_nearest(self._matrix(), thresholds, codes)
        return lq_from_codes(tuple(self.weight.shape), self.basis.numpy(), code)


class LQActivationQuantizer(nn.Module):
    """One layer's input quantizer: levels ``offset + sum_i alpha[i] * bit_i(v)``. ``forward(x)``
    returns x on its nearest level, gradient 1 inside [lowest, highest level] and 0 outside (NaN
    stays NaN); in training mode the basis (and the offset unless ``nonnegative``) is first refitted
    by QEM on the batch with the moving average ``momentum``."""

    def __init__(self, alpha: np.ndarray, offset: float, nonnegative: bool, *, momentum: float = DEFAULT_MOMENTUM,
                 qem_iters: int = DEFAULT_QEM_ITERS) -> None:
        super().__init__()
        self.register_buffer("alpha", torch.from_numpy(np.asarray(alpha, dtype=np.float32).copy()))
        self.register_buffer("offset", torch.tensor(0.0 if nonnegative else float(offset), dtype=torch.float32))
        self.nonnegative, self.momentum, self.qem_iters = nonnegative, momentum, qem_iters

    @property
    def basis(self) -> tuple[np.ndarray, float]:
        """(alpha (K,) float32, offset) as the LQQuantize node stores them."""
        return self.alpha.numpy().copy(), float(self.offset)

    @torch.no_grad()
    def update_basis(self, x: torch.Tensor) -> None:
        values = x.detach().reshape(-1)
        if values.numel() > _ACT_SAMPLES:  # a strided subset (deterministic)
            values = values[:: math.ceil(values.numel() / _ACT_SAMPLES)]
        alpha, offset = qem_activation_step(values.cpu().numpy(), self.alpha.numpy(), float(self.offset),
                                            self.nonnegative, self.qem_iters)
        m = self.momentum
        mixed = np.sort(m * self.alpha.numpy().astype(np.float64) + (1 - m) * alpha)
        self.alpha.copy_(torch.from_numpy(mixed.astype(np.float32)))
        if not self.nonnegative:
            self.offset.fill_(float(np.float32(m * float(self.offset) + (1 - m) * offset)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.update_basis(x)
        alpha, offset = self.basis
        levels = lq.activation_levels(alpha, offset)
        thresholds, codes = lq.level_table(levels)
        q = _nearest(x.detach(), levels, thresholds, codes).to(x.dtype)
        q = torch.where(torch.isnan(x), x.detach(), q)
        low, high = float(levels.min()), float(levels.max())
        inside = ((x >= low) & (x <= high)).to(x.dtype)
        return straight_through(x, q, inside)


# ---------------------------------------------------------------------------------------------
# The graph module
# ---------------------------------------------------------------------------------------------
class LQGraphModule(CompressibleGraphModule):
    """A :class:`CompressibleGraphModule` whose LQ layers take their weights from
    :class:`LQWeightQuantizer` sources and, where set, run their input through an
    :class:`LQActivationQuantizer` (``act_quantizers``, keyed by node name)."""

    def __init__(self, graph: Graph) -> None:
        super().__init__(graph)
        self.act_quantizers = nn.ModuleDict()
        self._act_key: dict[str, str] = {}
        self.capture: set[str] = set()  # node names whose (quantized-so-far) input forward records
        self.captured: dict[str, torch.Tensor] = {}

    def set_act_quantizer(self, node_name: str, quantizer: LQActivationQuantizer) -> None:
        key = self._act_key.setdefault(node_name, f"a{len(self._act_key)}")
        self.act_quantizers[key] = quantizer

    def act_quantizer(self, node_name: str) -> LQActivationQuantizer | None:
        key = self._act_key.get(node_name)
        return None if key is None else self.act_quantizers[key]

    def forward(self, *inputs: torch.Tensor):
        saved = self.tensor_params
        self.tensor_params = {**saved, **{name: self.sources[key]() for name, key in self._source_key.items()}}
        try:
            env = self.environment(inputs)
        finally:
            self.tensor_params = saved
        return self.run_nodes(env)

    def node_arguments(self, node: Node, args: list) -> list:
        """The input quantizers in front of their layers (and the captured float inputs)."""
        if node.name in self.capture:
            self.captured[node.name] = args[0].detach()
        quantizer = self.act_quantizer(node.name)
        if quantizer is not None:
            args[0] = quantizer(args[0])
        return args


# ---------------------------------------------------------------------------------------------
# Setting a graph up
# ---------------------------------------------------------------------------------------------
@dataclass
class LQLayer:
    node: str
    weight: str
    bits: int
    act_bits: int | None


@dataclass
class LQSetup:
    """A graph prepared for LQ training under ``recipe``: ``module`` (an :class:`LQGraphModule`),
    the LQ layers in graph order, and the graph the final encodings go into."""
    graph: Graph
    recipe: Recipe
    module: LQGraphModule
    layers: list[LQLayer] = field(default_factory=list)

    def summary(self) -> str:
        rows = []
        for layer in self.layers:
            act = f"{layer.act_bits}-bit inputs" if layer.act_bits else "float inputs"
            quantizer = self.module.act_quantizer(layer.node)
            if quantizer is not None:
                act += " (offset 0)" if quantizer.nonnegative else f" (offset {float(quantizer.offset):.3g})"
            rows.append(f"{layer.node} lq{layer.bits} weights, {act}")
        return "; ".join(rows)

    def final_graph(self) -> Graph:
        """The trained graph: every LQ layer's :class:`LQBinary` from its final basis and float weight,
        its LQQuantize in front where its input is quantized, other weights dense; compression
        reports in ``metadata["compression"]`` (as ``compress`` writes them) for ``pack_model``."""
        module = self.module
        module.eval()
        graph = write_back(self.graph.copy(), module)  # LQ weights written as their quantized values
        nodes = {n.name: n for n in graph.nodes}
        layers = {layer.node: layer for layer in self.layers}
        reports = []
        for node, name in compressible_layers(graph):
            layer = layers.get(node.name)
            w = graph.const(name).astype(np.float32)
            if layer is None:
                reports.append(_report(node, name, w, None))
                continue
            encoding = module.source(name).encoding()
            decoded = encoding.decode()
            if not np.array_equal(decoded, w):  # cannot happen: both are the numpy tables' levels
                raise EdgeSDKError(f"{node.name}: the LQ encoding does not decode to the trained weights")
            if encoding.nbytes >= w.nbytes:  # as compress: never grow a layer (same values, dense)
                reports.append(_report(node, name, w, encoding, kept_dense=True))
            else:
                graph.add_encoded(name, encoding)
                reports.append(_report(node, name, w, encoding))
            quantizer = module.act_quantizer(node.name)
            if quantizer is not None:
                insert_quantizer(graph, nodes[node.name], *quantizer.basis)
        graph.remove_unused_tensors()
        graph.metadata["compression"] = {"recipe": self.recipe.to_dict(), "layers": [r.to_dict() for r in reports]}
        return graph


def lq_setup(graph: Graph, recipe: Recipe, calibration: np.ndarray, *, momentum: float = DEFAULT_MOMENTUM,
             qem_iters: int = DEFAULT_QEM_ITERS, unmatched: Unmatched = "warn", seed: int = 0) -> LQSetup:
    """Prepare ``graph`` (optimised, float) for LQ training: weight quantizers initialised by the
    numpy QEM of the starting weights, activation quantizers by QEM on the layers' inputs over
    ``calibration`` (input samples), one layer at a time in graph order with the quantizers before
    it in place (the seed's "uptraining"). Layers whose settings have other compression than LQ are
    refused (:class:`InputError`); layers without settings train dense."""
    graph = graph.copy()
    layers = [(node, _weights_out_in(graph, node, name)) for node, name in compressible_layers(graph)]
    check_patterns(recipe, layers, graph.name, unmatched)
    graph.remove_unused_tensors()
    plan = [(node, name, _effective(recipe, node, name, graph)) for node, name in layers]
    other = [node.name for node, _, s in plan if s.compresses and s.lq_bits is None]
    if other or recipe.global_prune is not None or any(s.int8 for _, _, s in plan):
        raise InputError("LQ fine-tuning trains binary-coded layers (lq_bits) and leaves the others dense: the recipe "
                         "also prunes, clusters, NNMs, halves or int8-quantizes "
                         f"{', '.join(other[:3]) or 'some layers'}; fine-tune those in a recipe of their own")
    module = LQGraphModule(graph)
    setup = LQSetup(graph, recipe, module)
    for node, name, s in plan:
        if s.lq_bits is None or s.skip or node.op not in LQ_OPS:
            continue
        quantizer = LQWeightQuantizer(graph.const(name), s.lq_bits, momentum=momentum, qem_iters=qem_iters)
        module.set_source(name, quantizer)
        setup.layers.append(LQLayer(node.name, name, s.lq_bits, s.lq_activations))
    x = torch.from_numpy(np.ascontiguousarray(calibration, dtype=np.float32))
    module.eval()
    for layer in setup.layers:
        if not layer.act_bits:
            continue
        module.capture, module.captured, chunks = {layer.node}, {}, []
        with torch.no_grad():
            for i in range(0, len(x), 256):
                module(x[i: i + 256])
                chunks.append(module.captured[layer.node].reshape(-1).numpy())
        values = np.concatenate(chunks)
        nonnegative = bool(np.nanmin(values) >= 0) if np.isfinite(values).any() else True
        alpha, offset = lq.fit_activation_basis(values, layer.act_bits, nonnegative=nonnegative, seed=seed)
        module.set_act_quantizer(layer.node, LQActivationQuantizer(alpha, offset, nonnegative, momentum=momentum,
                                                                   qem_iters=qem_iters))
    module.capture, module.captured = set(), {}
    return setup


# ---------------------------------------------------------------------------------------------
# The driver
# ---------------------------------------------------------------------------------------------
def lq_finetune_graph(graph: Graph, recipe: Recipe, train_data: Dataset, *, test: Dataset | None = None,
                      epochs: int = DEFAULT_LQ_EPOCHS, lr: float = DEFAULT_LQ_LR, batch_size: int = DEFAULT_BATCH,
                      seed: int = 0, log: Log | None = print, progress: ProgressFactory | None = None,
                      unmatched: Unmatched = "warn", calibration: np.ndarray | None = None,
                      momentum: float = DEFAULT_MOMENTUM, qem_iters: int = DEFAULT_QEM_ITERS,
                      distill: float = DEFAULT_DISTILL, temperature: float = DEFAULT_TEMPERATURE,
                      weight_decay: float = DEFAULT_WEIGHT_DECAY, optimizer: str = "adam",
                      augment: Callable | None = None, report: dict | None = None, **unused: Any) -> Graph:
    """LQ-Nets training of an (optimised, float) graph for a recipe with ``lq_bits`` /
    ``lq_act_bits``; returns the graph with the LQ encodings and LQQuantize nodes, ready for
    ``pack_model(source, out, recipe, graph=...)`` (nothing is re-encoded there).

    Adam (or SGD, ``optimizer``) on the float weights and biases at ``lr`` with cosine decay for
    ``epochs``, cross-entropy mixed with ``distill`` of distillation from the float graph
    (temperature ``temperature``); quantizer bases by QEM each step (``momentum``, ``qem_iters``).
    ``calibration`` (input samples) starts the activation bases (default: the first 256 training
    samples). Deterministic for a ``seed``. ``report`` (a dict), when given, receives the module's
    test accuracy at the end (``module_accuracy``), the history and the seconds. Options of the
    other fine-tunings that mean nothing here (``beta``, ``prune_ramp``, ...) are refused."""
    bad = sorted(k for k, v in unused.items() if v is not None)
    if bad:
        raise InputError(f"LQ fine-tuning does not take {', '.join(bad)} (options of the codebook / NNM fine-tuning)")
    FinetuneConfig(epochs=epochs, lr=lr, batch_size=batch_size)  # the same one-line checks
    if not 0.0 <= momentum < 1.0:
        raise InputError(f"LQ basis momentum must be in [0, 1), got {momentum!r}")
    if not (isinstance(qem_iters, int) and qem_iters >= 1):
        raise InputError(f"qem_iters must be a positive integer, got {qem_iters!r}")
    check_trainable(graph, train_data, test)
    started = time.perf_counter()
    torch.manual_seed(seed)
    if calibration is None:
        calibration = train_data.x[:DEFAULT_CALIBRATION]
    setup = lq_setup(graph, recipe, calibration, momentum=momentum, qem_iters=qem_iters, unmatched=unmatched,
                     seed=seed)
    if not setup.layers:
        raise InputError("the recipe's lq_bits matches no Conv / Gemm layer of the model")
    module = setup.module
    if log is not None:
        start = f"; test acc before training {module_accuracy(module, test):.4f}" if test is not None else ""
        log("LQ fine-tuning: " + setup.summary() + start)
    teacher = None
    if distill > 0:
        teacher = GraphModule(setup.graph).eval()
        for p in teacher.parameters():
            p.requires_grad_(False)
    loss_fn = _loss_fn(setup.graph, 0.0, teacher, distill, temperature)
    params = [p for p in module.parameters() if p.requires_grad]
    if optimizer == "adam":
        opt = torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    elif optimizer == "sgd":
        opt = torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=weight_decay)
    else:
        raise InputError(f"optimizer must be 'adam' or 'sgd', got {optimizer!r}")
    gen = torch.Generator().manual_seed(seed)
    history = train(module, opt, _dataset_batches(train_data, batch_size, gen, augment), loss_fn, epochs=epochs,
                    test=test, log=log, tag="lq", progress=progress)
    module.eval()
    final = setup.final_graph()
    accuracy = module_accuracy(module, test) if test is not None else None
    if log is not None and accuracy is not None:
        log(f"LQ encodings written (weights on their final bases' levels): test acc {accuracy:.4f}")
    if report is not None:
        report.update(accuracy=accuracy, history=history, seconds=time.perf_counter() - started,
                      layers=setup.summary())
    return final
