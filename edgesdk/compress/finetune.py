"""Compression-aware fine-tuning: CPT for NNM layers, codebook fine-tuning for clustered layers.

What each Conv/Gemm layer does comes from a :class:`~edgesdk.compress.recipe.Recipe`, through the
same rules :func:`edgesdk.compress.apply.compress` applies (``compressible_layers``, ``_effective``,
the global pruning threshold, Gemm weights stored (out, in)), so that the graph this module returns
encodes *exactly* (``error_rms == 0`` for every layer):

* **NNM layers** (``nnm_rate``) train under :class:`CPTOptimizer` (seed 003 §2.3.2, corrected sign):
  after every step of the wrapped optimizer, ``θ ← θ + β(S̃M − θ)`` pulls each filter (``shared``:
  the whole filter; ``per_input_channel``: its slice for every input channel) toward the centroid of
  its cluster; k-means re-runs every ``recluster_every`` steps warm-started from the previous
  centroids. ``finalize`` hard-assigns every filter to its centroid, so the layer has at most
  K̃ = round((1 − rate)·K) distinct filters and ``encode_nnm`` reproduces it without error.
* **Clustered layers** (``cluster_bits``, optionally pruned): Han-style. The pruning mask is computed
  once from the starting weights (magnitude, per layer or one ``global_prune`` threshold) and kept.
  For the first ``cluster_after`` of the epochs the kept weights retrain freely (prune-retrain);
  then the codebook is built by the same k-means as ``encode`` (init, per-layer / per-channel,
  entry 0 reserved for the zero of pruned weights), indices are frozen, and the layer's weight *is*
  ``codebook[index]`` in every forward pass, so each centroid's gradient is the sum of the gradients
  of the weights assigned to it. The reserved zero entry is not a parameter: it stays exactly 0.
* **Pruned layers without a codebook**: the mask multiplies the weight, pruned weights stay 0.
* **Other layers** (fp16-only, skipped, dense) **train normally**; fp16 layers (and every fp16
  codebook / centroid) are rounded to half precision by ``finalize``.

The loss is cross-entropy mixed with knowledge distillation from the starting graph (``distill``,
0.5 by default: on the digits model it is what makes the accuracy targets hold for every seed).
Everything here needs torch (``pip install torch``, or ``pip install -e '.[train]'`` in the edgesdk
source checkout); import this module only to fine-tune.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from ..errors import DatasetError, EdgeSDKError, InputError, UnsupportedModelError

try:
    import torch
    import torch.nn.functional as F
    from torch import nn
except ImportError:  # pragma: no cover - exercised only without the train extra
    raise EdgeSDKError("fine-tuning needs PyTorch: pip install torch (or, in the edgesdk source checkout, "
                       "pip install -e '.[train]')") from None

from ..datasets import Dataset
from ..graph import Graph, Node
from ..progress import ProgressFactory
from .apply import (Unmatched, _effective, _global_threshold, _weights_out_in, check_patterns, compress,
                    compressible_layers)
from .encode import _codebooks, magnitude_threshold, matrix_view, prune_mask
from .kmeans import kmeans_vectors
from .recipe import LayerSettings, Recipe
from .torch_bridge import GraphModule, module_to_graph, write_back

Log = Callable[[str], None]

# Defaults tuned on the default digits model: 5-20 s per fine-tuning on one CPU core.
DEFAULT_EPOCHS = 40
DEFAULT_LR = 3e-3
DEFAULT_OPTIMIZER = "adam"
DEFAULT_BATCH = 64
DEFAULT_BETA = 0.05
DEFAULT_RECLUSTER_EVERY = 1
DEFAULT_KMEANS_ITERS = 3
DEFAULT_WEIGHT_DECAY = 1e-4
DEFAULT_LABEL_SMOOTHING = 0.0
DEFAULT_DISTILL = 0.5  # knowledge distillation from the starting graph: the biggest single gain
DEFAULT_TEMPERATURE = 2.0
DEFAULT_CODEBOOK_LR_FACTOR = 1 / 3  # codebook phase learning rate = lr x this
DEFAULT_N_INIT = 10  # k-means++ restarts for CPT's first clustering (the outcome depends on it)
DEFAULT_CLUSTER_AFTER = 0.5  # clustered layers: half the epochs masked retraining, half codebooks
DEFAULT_PRUNE_RAMP = 0.5  # gradual pruning over the first half of the retraining epochs


# ---------------------------------------------------------------------------------------------
# CPT: centripetal pull of NNM layers toward their cluster centroids
# ---------------------------------------------------------------------------------------------
def nnm_clusters(out_channels: int, rate: float) -> int:
    """K̃ for a layer of K output channels at NNM rate r (the rule ``encode_nnm`` uses)."""
    return max(1, int(round((1.0 - rate) * out_channels)))


@dataclass
class CPTLayer:
    """One NNM layer under CPT. ``param`` is the weight, output channels first (Conv OIHW, Linear
    (out, in)); ``clusters`` = K̃; ``mode`` ``shared`` (rows = whole filters) or
    ``per_input_channel`` (for each input channel, the K filter slices; Conv only)."""
    param: torch.Tensor
    clusters: int
    mode: str = "shared"
    name: str = ""
    centroids: np.ndarray | None = None  # (B, K̃, D) of the last k-means
    assign: np.ndarray | None = None  # (B, K)

    def __post_init__(self) -> None:
        if self.mode not in ("shared", "per_input_channel"):
            raise ValueError(f"CPT mode must be 'shared' or 'per_input_channel', got {self.mode!r}")
        if self.mode == "per_input_channel" and self.param.dim() != 4:
            raise ValueError(f"{self.name or 'layer'}: per_input_channel NNM needs a 4-D conv weight")

    def vectors(self) -> np.ndarray:
        """The points k-means clusters, (B, K, D)."""
        w = self.param.detach().cpu().numpy().astype(np.float64)
        k = w.shape[0]
        if self.mode == "shared":
            return w.reshape(1, k, -1)
        return np.ascontiguousarray(np.moveaxis(w, 1, 0)).reshape(w.shape[1], k, -1)  # (C, K, R*S)

    def target(self) -> torch.Tensor:
        """S̃M: every filter replaced by its centroid, in the parameter's shape."""
        b = self.assign.shape[0]
        rebuilt = self.centroids[np.arange(b)[:, None], self.assign]  # (B, K, D)
        shape = tuple(self.param.shape)
        if self.mode == "shared":
            out = rebuilt.reshape(shape)
        else:  # (C, K, R*S) -> (K, C, R, S)
            out = np.moveaxis(rebuilt.reshape((shape[1], shape[0]) + shape[2:]), 0, 1)
        return torch.from_numpy(np.ascontiguousarray(out, dtype=np.float32)).to(self.param.device)


class CPTOptimizer:
    """Converge Points Transition around any torch optimizer (seed 003 §2.3.2, corrected sign).

    ``step()`` runs the wrapped optimizer (SGD with weight decay gives θ − ε(g + αθ)), then pulls
    every NNM layer toward its centroids: ``θ ← θ + β(S̃M − θ)``. The clustering (S̃, M) is re-run
    every ``recluster_every`` steps with ``kmeans_iters`` Lloyd iterations warm-started from the
    previous centroids (the first one from k-means++ with ``seed``, as ``encode_nnm`` starts); in
    between, the assignment is kept and the centroids follow the filters' means. ``finalize()``
    replaces every filter by its centroid (exact copies), ready for ``compress``.

    ``layers``: :class:`CPTLayer` objects, or ``(param, clusters, mode)`` tuples.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, layers: Sequence[CPTLayer | tuple], *,
                 beta: float = DEFAULT_BETA, recluster_every: int = DEFAULT_RECLUSTER_EVERY,
                 kmeans_iters: int = DEFAULT_KMEANS_ITERS, warmup_steps: int = 0, n_init: int = DEFAULT_N_INIT,
                 seed: int = 0) -> None:
        if not 0.0 <= beta <= 1.0:
            raise ValueError(f"beta must be in [0, 1] (the fraction of the distance to the centroid per step), got {beta}")
        if recluster_every < 1 or kmeans_iters < 1:
            raise ValueError("recluster_every and kmeans_iters must be >= 1")
        self.optimizer = optimizer
        self.layers = [layer if isinstance(layer, CPTLayer) else CPTLayer(*layer) for layer in layers]
        self.beta = beta
        self.recluster_every = recluster_every
        self.kmeans_iters = kmeans_iters
        self.warmup_steps = warmup_steps
        self.n_init = max(1, n_init)
        self.seed = seed
        self.steps = 0
        for layer in self.layers:
            self._cluster(layer, initial=True)

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "steps": self.steps,
                "clusters": [(layer.centroids, layer.assign) for layer in self.layers]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.steps = state["steps"]
        for layer, (c, a) in zip(self.layers, state["clusters"]):
            layer.centroids, layer.assign = c, a

    def step(self, closure=None):
        loss = self.optimizer.step(closure)
        self.steps += 1
        recluster = self.steps % self.recluster_every == 0
        for layer in self.layers:
            if recluster:
                self._cluster(layer)
            else:
                self._follow_means(layer)
            self.pull(layer, self.current_beta)
        return loss

    @property
    def current_beta(self) -> float:
        """β, ramped linearly from 0 over the first ``warmup_steps`` steps."""
        if self.warmup_steps <= 0:
            return self.beta
        return self.beta * min(1.0, self.steps / self.warmup_steps)

    @torch.no_grad()
    def pull(self, layer: CPTLayer, beta: float) -> None:
        """θ ← θ + β(S̃M − θ): each filter moves a fraction β of the way to its centroid."""
        layer.param.add_(beta * (layer.target() - layer.param))

    def _cluster(self, layer: CPTLayer, initial: bool = False, iters: int | None = None) -> None:
        x = layer.vectors()
        if initial or layer.centroids is None:  # best of n_init k-means++ runs, per group
            best = None
            for run in range(self.n_init):
                c, a = kmeans_vectors(x, layer.clusters, init="kmeans++", seed=self.seed + run)
                wcss = ((x - c[np.arange(len(a))[:, None], a]) ** 2).sum(axis=(1, 2))
                if best is None:
                    best = [c, a, wcss]
                else:
                    better = wcss < best[2]
                    best[0][better], best[1][better], best[2][better] = c[better], a[better], wcss[better]
            layer.centroids, layer.assign = best[0], best[1]
        else:
            layer.centroids, layer.assign = kmeans_vectors(
                x, layer.centroids.shape[1], init=layer.centroids, iters=iters or self.kmeans_iters, seed=self.seed)

    def _follow_means(self, layer: CPTLayer) -> None:
        x = layer.vectors()
        b, n, _ = x.shape
        k = layer.centroids.shape[1]
        onehot = np.zeros((b, n, k))
        np.put_along_axis(onehot, layer.assign[:, :, None], 1.0, axis=2)
        counts = onehot.sum(axis=1)
        sums = np.einsum("bnk,bnd->bkd", onehot, x)
        layer.centroids = np.where(counts[:, :, None] > 0, sums / np.maximum(counts, 1)[:, :, None],
                                   layer.centroids).astype(np.float32)

    @torch.no_grad()
    def finalize(self, fp16: Sequence[bool] | bool = False) -> None:
        """Re-cluster to convergence (warm start), then set every filter to its centroid exactly.
        ``fp16`` (per layer or for all) rounds the centroids to half precision first."""
        flags = [fp16] * len(self.layers) if isinstance(fp16, bool) else list(fp16)
        for layer, half in zip(self.layers, flags):
            self._cluster(layer, iters=50)
            if half:
                layer.centroids = layer.centroids.astype(np.float16).astype(np.float32)
            layer.param.copy_(layer.target())


# ---------------------------------------------------------------------------------------------
# Weights computed from a codebook or a mask
# ---------------------------------------------------------------------------------------------
class CodebookWeight(nn.Module):
    """``weight = codebook[group, index]`` with frozen indices; the trainable part is the codebook
    (without entry 0 when it is the reserved zero of pruned weights). Autograd's backward of the
    gather sums the gradients of all weights that share a centroid."""

    def __init__(self, shape: tuple[int, ...], book: np.ndarray, index: np.ndarray, zero_reserved: bool) -> None:
        super().__init__()
        self.shape = tuple(shape)
        self.zero_reserved = zero_reserved
        self.groups, self.k = book.shape
        free = book[:, 1:] if zero_reserved else book
        self.codebook = nn.Parameter(torch.from_numpy(np.array(free, dtype=np.float32)))
        rows = index.shape[0]
        group = np.zeros(rows, dtype=np.int64) if self.groups == 1 else np.arange(rows)
        flat = (group[:, None] * self.k + index).reshape(-1)
        self.register_buffer("flat_index", torch.from_numpy(flat.astype(np.int64)))

    def full_codebook(self) -> torch.Tensor:
        if not self.zero_reserved:
            return self.codebook
        zeros = torch.zeros((self.groups, 1), dtype=self.codebook.dtype, device=self.codebook.device)
        return torch.cat([zeros, self.codebook], dim=1)

    def forward(self) -> torch.Tensor:
        return self.full_codebook().reshape(-1)[self.flat_index].reshape(self.shape)

    @torch.no_grad()
    def round_fp16(self) -> None:
        self.codebook.copy_(self.codebook.half().float())


class MaskedWeight(nn.Module):
    """``weight = param * mask``: pruned weights are exactly 0 and get no gradient."""

    def __init__(self, value: np.ndarray, keep: np.ndarray) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.from_numpy(np.array(value, dtype=np.float32)))
        self.register_buffer("keep", torch.from_numpy(np.asarray(keep, dtype=np.float32)))

    def forward(self) -> torch.Tensor:
        return self.weight * self.keep

    @torch.no_grad()
    def round_fp16(self) -> None:
        self.weight.copy_(self.weight.half().float())


class CompressibleGraphModule(GraphModule):
    """A :class:`GraphModule` whose weights may come from a :class:`CodebookWeight` or
    :class:`MaskedWeight` instead of a plain parameter."""

    def __init__(self, graph: Graph) -> None:
        super().__init__(graph)
        self.sources = nn.ModuleDict()
        self._source_key: dict[str, str] = {}

    def set_source(self, tensor_name: str, source: nn.Module) -> None:
        """Compute ``tensor_name`` with ``source()`` from now on (its plain parameter is frozen)."""
        self.parameter_for(tensor_name).requires_grad_(False)
        key = self._source_key.setdefault(tensor_name, f"w{len(self._source_key)}")
        self.sources[key] = source

    def source(self, tensor_name: str) -> nn.Module | None:
        key = self._source_key.get(tensor_name)
        return None if key is None else self.sources[key]

    def tensor_value(self, tensor_name: str) -> torch.Tensor:
        source = self.source(tensor_name)
        return source() if source is not None else self.tensor_params[tensor_name]

    def forward(self, *inputs: torch.Tensor):
        saved = self.tensor_params
        self.tensor_params = {**saved, **{name: self.sources[key]() for name, key in self._source_key.items()}}
        try:
            return super().forward(*inputs)
        finally:
            self.tensor_params = saved

    @torch.no_grad()
    def bake(self) -> None:
        """Copy every computed weight into its plain parameter (what ``write_back`` copies)."""
        for name, key in self._source_key.items():
            self.tensor_params[name].copy_(self.sources[key]())


# ---------------------------------------------------------------------------------------------
# Setting a graph up for compression-aware training
# ---------------------------------------------------------------------------------------------
@dataclass
class LayerRole:
    node: str
    weight: str
    settings: LayerSettings
    role: str  # "nnm", "codebook", "masked", "dense"
    keep: np.ndarray | None = None  # pruning mask (True = kept), fixed for the whole fine-tuning

    @property
    def kept(self) -> float:
        return 1.0 if self.keep is None else float(self.keep.mean())

    @property
    def zero_reserved(self) -> bool:
        return self.keep is not None

    def describe(self) -> str:
        s = self.settings
        pruned = f", {100 * (1 - self.kept):.0f}% pruned" if self.keep is not None else ""
        half = " fp16" if s.fp16 and not s.skip else ""
        if self.role == "nnm":
            return f"nnm-{s.nnm_mode} {100 * s.nnm_rate:.0f}% + CPT{half}"
        if self.role == "codebook":
            return f"codebook {s.cluster_bits}b/{'channel' if s.per_channel else 'layer'}{pruned}{half}"
        if self.role == "masked":
            return f"masked{pruned}{half}"
        return "dense" + half


class FinetuneSetup:
    """A graph prepared for compression-aware fine-tuning under ``recipe``.

    ``module`` is the trainable :class:`CompressibleGraphModule`. Pruning masks are computed once,
    from the starting weights, with ``compress``'s rules (per-layer ``prune`` or one
    ``global_prune`` threshold). Clustered layers start as masked dense weights (free retraining
    after pruning) until :meth:`start_codebooks` clusters them (same k-means as ``encode``) and
    freezes their indices; with ``cluster_now`` that happens right away. ``optimizer(...)`` builds
    the optimizer (wrapped in :class:`CPTOptimizer` when there are NNM layers; CPT's clustering
    survives a rebuild); :meth:`finalize` puts every weight exactly on its codebook / centroid /
    mask and :meth:`graph` returns the fine-tuned Graph.
    """

    def __init__(self, graph: Graph, recipe: Recipe, *, seed: int = 0, cluster_now: bool = True,
                 unmatched: Unmatched = "warn") -> None:
        graph = graph.copy()
        # As compress does: Gemm weights stored (out, in) so rows are output channels.
        layers = [(node, _weights_out_in(graph, node, name)) for node, name in compressible_layers(graph)]
        check_patterns(recipe, layers, graph.name, unmatched)  # the names compress will see, before training
        graph.remove_unused_tensors()
        self.recipe, self.seed, self._graph = recipe, seed, graph
        plan = [(node, name, _effective(recipe, node, name, graph)) for node, name in layers]
        threshold = _global_threshold(graph, plan, recipe.global_prune)
        self._global_prune = recipe.global_prune if threshold is not None else None
        self.module = CompressibleGraphModule(graph)
        self.roles: list[LayerRole] = []
        self.nnm_layers: list[CPTLayer] = []
        self._nnm_fp16: list[bool] = []
        self.cpt: CPTOptimizer | None = None
        self.clustered = False
        for node, name, s in plan:
            self.roles.append(self._setup_layer(node, name, graph.const(name).astype(np.float32), s, threshold))
        if cluster_now:
            self.start_codebooks()

    def _setup_layer(self, node: Node, name: str, w: np.ndarray, s: LayerSettings,
                     threshold: float | None) -> LayerRole:
        if not s.compresses:
            return LayerRole(node.name, name, s, "dense")
        if s.nnm_rate is not None:
            self.nnm_layers.append(CPTLayer(self.module.parameter_for(name), nnm_clusters(w.shape[0], s.nnm_rate),
                                            s.nnm_mode, name=node.name))
            self._nnm_fp16.append(s.fp16)
            return LayerRole(node.name, name, s, "nnm")
        prunes = threshold is not None or s.prune > 0
        keep = prune_mask(w, s.prune, threshold) if prunes else None
        if keep is not None:
            self.module.set_source(name, MaskedWeight(w, keep))
        return LayerRole(node.name, name, s, "codebook" if s.cluster_bits else "masked" if prunes else "dense", keep)

    @property
    def has_codebooks(self) -> bool:
        return any(r.role == "codebook" for r in self.roles)

    @property
    def prunes(self) -> bool:
        return any(r.keep is not None for r in self.roles)

    @torch.no_grad()
    def prune_fraction(self, fraction: float, *, restart: bool = False) -> None:
        """Gradual pruning: recompute every pruned layer's mask at ``fraction`` of its final sparsity
        from the current weights (same magnitude rule as ``compress``). Weights pruned before stay
        pruned, so masks only grow; ``restart`` first forgets the one-shot masks of the starting
        weights. Only before :meth:`start_codebooks`: k-means must see the final mask."""
        if self.clustered:
            raise EdgeSDKError("pruning masks are fixed once the codebooks are clustered")
        pruned = [r for r in self.roles if r.keep is not None]
        current = {}
        for r in pruned:
            source = self.module.source(r.weight)
            keep = 1.0 if restart else source.keep
            current[r.weight] = (source.weight * keep).detach().cpu().numpy()
        threshold = None
        if self._global_prune is not None:
            pool = np.concatenate([np.abs(w).reshape(-1) for w in current.values()])
            threshold = magnitude_threshold(pool, self._global_prune * fraction)
        for r in pruned:
            keep = prune_mask(current[r.weight], r.settings.prune * fraction, threshold)
            r.keep = keep
            self.module.source(r.weight).keep.copy_(torch.from_numpy(keep.astype(np.float32)))

    @torch.no_grad()
    def start_codebooks(self) -> None:
        """Cluster every codebook layer's current (masked) weights as ``encode`` would and switch it
        to codebook training (indices frozen from here on)."""
        if self.clustered:
            return
        for r in self.roles:
            if r.role != "codebook":
                continue
            s = r.settings
            w = self.module.tensor_value(r.weight).detach().cpu().numpy().astype(np.float32)
            m = matrix_view(w)
            keep_m = matrix_view(r.keep).astype(bool) if r.keep is not None else np.ones(m.shape, dtype=bool)
            book, index = _codebooks(m, keep_m, s.cluster_bits, s.per_channel, s.init, r.zero_reserved, self.seed)
            self.module.set_source(r.weight, CodebookWeight(w.shape, book, index, r.zero_reserved))
        self.clustered = True

    def trainable_parameters(self) -> list[nn.Parameter]:
        return [p for p in self.module.parameters() if p.requires_grad]

    def optimizer(self, lr: float = DEFAULT_LR, *, kind: str = DEFAULT_OPTIMIZER, momentum: float = 0.9,
                  weight_decay: float = DEFAULT_WEIGHT_DECAY, beta: float = DEFAULT_BETA,
                  recluster_every: int = DEFAULT_RECLUSTER_EVERY, kmeans_iters: int = DEFAULT_KMEANS_ITERS,
                  warmup_steps: int = 0, n_init: int = DEFAULT_N_INIT):
        """A fresh optimizer over the currently trainable parameters; CPT-wrapped when the recipe has
        NNM layers (a rebuilt one keeps the CPT clustering and step count)."""
        params = self.trainable_parameters()
        if kind == "sgd":
            inner = torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
        elif kind == "adam":
            inner = torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
        else:
            raise ValueError(f"optimizer kind must be 'sgd' or 'adam', got {kind!r}")
        if not self.nnm_layers:
            return inner
        if self.cpt is None:
            self.cpt = CPTOptimizer(inner, self.nnm_layers, beta=beta, recluster_every=recluster_every,
                                    kmeans_iters=kmeans_iters, warmup_steps=warmup_steps, n_init=n_init,
                                    seed=self.seed)
        else:
            self.cpt.optimizer = inner
        return self.cpt

    @torch.no_grad()
    def finalize(self) -> None:
        """Weights exactly on their codebooks / centroids, pruned weights exactly 0, fp16 where the
        recipe stores half."""
        self.start_codebooks()
        if self.nnm_layers:
            cpt = self.cpt or CPTOptimizer(torch.optim.SGD([self.nnm_layers[0].param], lr=0.0), self.nnm_layers,
                                           seed=self.seed)
            cpt.finalize(self._nnm_fp16)
        for r in self.roles:
            if r.role == "nnm" or not r.settings.fp16 or r.settings.skip:
                continue
            source = self.module.source(r.weight)
            if source is not None:
                source.round_fp16()
            else:
                p = self.module.tensor_params[r.weight]
                p.copy_(p.half().float())
        self.module.bake()

    def graph(self) -> Graph:
        """The fine-tuned graph (a copy; call :meth:`finalize` first for exact encodings)."""
        return write_back(self._graph.copy(), self.module)

    def summary(self) -> str:
        return "; ".join(f"{r.node} {r.describe()}" for r in self.roles)


# ---------------------------------------------------------------------------------------------
# Training loop
# ---------------------------------------------------------------------------------------------
Batches = Callable[[int], Iterable[tuple[torch.Tensor, torch.Tensor]]]  # epoch -> (x, y) batches


def _dataset_batches(data: Dataset, batch_size: int, generator: torch.Generator,
                     augment: Callable | None) -> Batches:
    x, y = torch.from_numpy(np.ascontiguousarray(data.x)), torch.from_numpy(data.y.astype(np.int64))

    def batches(epoch: int):
        perm = torch.randperm(len(y), generator=generator)
        for i in range(0, len(perm), batch_size):
            idx = perm[i: i + batch_size]
            xb = x[idx]
            yield (augment(xb, generator) if augment is not None else xb), y[idx]
    return batches


def _loss_fn(graph: Graph, label_smoothing: float = 0.0, teacher: nn.Module | None = None,
             distill: float = 0.0, temperature: float = 2.0):
    """Cross-entropy on the graph's first output (logits; log-probabilities when it ends in
    Softmax), optionally mixed with knowledge distillation from ``teacher`` (the uncompressed
    graph): ``(1 - distill) * CE + distill * T^2 * KL(teacher_T || student_T)``."""
    producer = graph.producers().get(graph.outputs[0])
    probs = producer is not None and producer.op == "Softmax"

    def logits(out: torch.Tensor, n: int) -> torch.Tensor:
        out = out.reshape(n, -1)
        return torch.log(out.clamp_min(1e-12)) if probs else out

    def loss(out: torch.Tensor, y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        z = logits(out, len(y))
        ce = F.cross_entropy(z, y, label_smoothing=label_smoothing)
        if teacher is None or distill <= 0:
            return ce
        with torch.no_grad():
            zt = logits(_first_output(teacher(x)), len(y))
        kd = F.kl_div(F.log_softmax(z / temperature, 1), F.log_softmax(zt / temperature, 1), log_target=True,
                      reduction="batchmean") * temperature ** 2
        return (1 - distill) * ce + distill * kd
    return loss


def _first_output(out) -> torch.Tensor:
    return out[0] if isinstance(out, tuple) else out


@torch.no_grad()
def module_accuracy(module: nn.Module, data: Dataset, batch_size: int = 512) -> float:
    """Top-1 accuracy of a torch module (or GraphModule) on a Dataset."""
    was = module.training
    module.eval()
    correct = 0
    for i in range(0, len(data), batch_size):
        out = _first_output(module(torch.from_numpy(np.ascontiguousarray(data.x[i: i + batch_size]))))
        correct += int((out.reshape(out.shape[0], -1).argmax(1).numpy() == data.y[i: i + batch_size]).sum())
    module.train(was)
    return correct / max(1, len(data))


def train(module: nn.Module, optimizer, batches: Batches, loss_fn, *, epochs: int,
          test: Dataset | None = None, log: Log | None = print, lr_schedule: str = "cosine",
          epoch_offset: int = 0, total_epochs: int | None = None, tag: str = "",
          on_epoch: Callable[[int], None] | None = None, progress: ProgressFactory | None = None) -> list[dict]:
    """Plain supervised loop (cosine learning-rate decay over ``epochs``); one line per epoch to
    ``log``; ``on_epoch(epoch)`` runs before each epoch (1-based, offset included);
    ``progress(label)`` gives each epoch a callback ``(batch, batches, "loss ...")``, e.g. a bar
    (:func:`edgesdk.progress.transient`). Returns the per-epoch history."""
    inner = optimizer.optimizer if isinstance(optimizer, CPTOptimizer) else optimizer
    base_lrs = [g["lr"] for g in inner.param_groups]
    total_epochs = total_epochs or epochs
    history = []
    t0 = time.perf_counter()
    step, steps_total = 0, None
    for epoch in range(1, epochs + 1):
        if on_epoch is not None:
            on_epoch(epoch_offset + epoch)
        module.train()
        total = correct = 0
        loss_sum = 0.0
        batch_list = list(batches(epoch_offset + epoch))
        steps_total = steps_total or epochs * len(batch_list)
        bar = progress(f"epoch {epoch_offset + epoch}/{total_epochs}") if progress is not None else None
        for i, (xb, yb) in enumerate(batch_list, 1):
            if lr_schedule == "cosine":
                for g, base in zip(inner.param_groups, base_lrs):
                    g["lr"] = base * 0.5 * (1 + math.cos(math.pi * step / max(1, steps_total)))
            out = _first_output(module(xb))
            loss = loss_fn(out, yb, xb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            loss_sum += loss.item() * len(yb)
            correct += int((out.detach().reshape(len(yb), -1).argmax(1) == yb).sum())
            total += len(yb)
            if bar is not None:
                bar(i, len(batch_list), f"loss {loss_sum / total:.4f}")
        row = {"epoch": epoch_offset + epoch, "loss": loss_sum / max(1, total), "train_acc": correct / max(1, total),
               "seconds": time.perf_counter() - t0, "phase": tag}
        if test is not None:
            row["test_acc"] = module_accuracy(module, test)
        history.append(row)
        if log is not None:
            test_txt = f"  test acc {row['test_acc']:.4f}" if "test_acc" in row else ""
            log(f"epoch {epoch_offset + epoch:3d}/{total_epochs}{'  ' + tag if tag else ''}  loss {row['loss']:.4f}  "
                f"train acc {row['train_acc']:.4f}{test_txt}  {row['seconds']:5.1f}s")
    for g, base in zip(inner.param_groups, base_lrs):
        g["lr"] = base
    return history


def random_shift(max_shift: int = 1) -> Callable[[torch.Tensor, torch.Generator], torch.Tensor]:
    """Augmentation for small NCHW images: shift each image by up to ``max_shift`` pixels per axis
    (zero fill), drawing from the training loop's generator (deterministic)."""
    def shift(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        n, _, h, w = x.shape
        s = max_shift
        padded = F.pad(x, (s, s, s, s))
        dy = torch.randint(0, 2 * s + 1, (n,), generator=gen)
        dx = torch.randint(0, 2 * s + 1, (n,), generator=gen)
        rows = dy[:, None] + torch.arange(h)[None, :]
        cols = dx[:, None] + torch.arange(w)[None, :]
        idx_n = torch.arange(n)[:, None, None, None]
        idx_c = torch.arange(x.shape[1])[None, :, None, None]
        return padded[idx_n, idx_c, rows[:, None, :, None], cols[:, None, None, :]]
    return shift


# ---------------------------------------------------------------------------------------------
# Drivers
# ---------------------------------------------------------------------------------------------
@dataclass
class FinetuneConfig:
    """Hyper-parameters shared by the drivers (defaults tuned on the default digits model)."""
    epochs: int = DEFAULT_EPOCHS
    lr: float = DEFAULT_LR
    batch_size: int = DEFAULT_BATCH
    optimizer: str = DEFAULT_OPTIMIZER  # "adam" or "sgd" (momentum 0.9: the seed's SGD + weight decay)
    weight_decay: float = DEFAULT_WEIGHT_DECAY
    label_smoothing: float = DEFAULT_LABEL_SMOOTHING
    beta: float = DEFAULT_BETA  # CPT pull per step
    beta_warmup: float = 0.0  # fraction of the steps over which beta ramps up from 0
    recluster_every: int = DEFAULT_RECLUSTER_EVERY
    kmeans_iters: int = DEFAULT_KMEANS_ITERS
    n_init: int = DEFAULT_N_INIT
    cluster_after: float | None = None  # fraction of epochs of masked retraining before codebooks
    codebook_lr: float | None = None  # learning rate of the codebook phase (default: lr / 3)
    distill: float = DEFAULT_DISTILL  # weight of knowledge distillation from the starting graph (0: off)
    temperature: float = DEFAULT_TEMPERATURE  # distillation temperature
    # gradual pruning (Zhu & Gupta): sparsity ramps up as s (1 - (1 - t/T)^3) over this fraction of
    # the free-retraining epochs, masks recomputed from the current weights each epoch (a weight
    # once pruned stays pruned); 0: the one-shot mask of the starting weights
    prune_ramp: float = DEFAULT_PRUNE_RAMP

    def __post_init__(self) -> None:
        # Checked here, not after an epoch has run: torch would fail late or silently do nothing.
        problems = [f"{name} must be a positive integer, got {getattr(self, name)!r}"
                    for name in ("epochs", "batch_size") if not _positive_int(getattr(self, name))]
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            problems.append(f"lr must be a positive number, got {self.lr!r}")
        if not 0.0 <= self.prune_ramp <= 1.0:
            problems.append(f"prune_ramp must be in [0, 1], got {self.prune_ramp!r}")
        if problems:
            raise InputError("fine-tuning: " + "; ".join(problems))


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _fit(setup: FinetuneSetup, batches: Batches, steps_per_epoch: int, cfg: FinetuneConfig,
         test: Dataset | None, log: Log | None, progress: ProgressFactory | None = None) -> list[dict]:
    teacher = None
    if cfg.distill > 0:
        teacher = GraphModule(setup._graph).eval()  # the starting weights, frozen
        for p in teacher.parameters():
            p.requires_grad_(False)
    loss_fn = _loss_fn(setup._graph, cfg.label_smoothing, teacher, cfg.distill, cfg.temperature)
    split = cfg.cluster_after if cfg.cluster_after is not None else DEFAULT_CLUSTER_AFTER
    first = int(round(split * cfg.epochs)) if setup.has_codebooks and not setup.clustered else 0
    opt_kw = dict(kind=cfg.optimizer, weight_decay=cfg.weight_decay, beta=cfg.beta,
                  recluster_every=cfg.recluster_every, kmeans_iters=cfg.kmeans_iters,
                  warmup_steps=int(cfg.beta_warmup * cfg.epochs * steps_per_epoch), n_init=cfg.n_init)
    history = []
    # prune gradually while weights are free, finished before k-means fixes the indices
    ramp = int(round(cfg.prune_ramp * (first if setup.has_codebooks else cfg.epochs))) if setup.prunes else 0

    def prune_step(epoch: int) -> None:
        if epoch <= ramp:
            setup.prune_fraction(1 - (1 - epoch / ramp) ** 3, restart=epoch == 1)
    on_epoch = prune_step if ramp > 0 else None
    if first > 0:  # retrain the pruned network with free weights, then cluster (Han et al.)
        opt = setup.optimizer(cfg.lr, **opt_kw)
        history += train(setup.module, opt, batches, loss_fn, epochs=first, test=test, log=log,
                         total_epochs=cfg.epochs, tag="retrain", on_epoch=on_epoch, progress=progress)
    setup.start_codebooks()
    rest = cfg.epochs - first
    if rest > 0:
        lr = cfg.lr
        if setup.has_codebooks:
            lr = cfg.codebook_lr if cfg.codebook_lr is not None else cfg.lr * DEFAULT_CODEBOOK_LR_FACTOR
        opt = setup.optimizer(lr, **opt_kw)
        history += train(setup.module, opt, batches, loss_fn, epochs=rest, test=test, log=log, epoch_offset=first,
                         total_epochs=cfg.epochs, tag="codebooks" if setup.has_codebooks else "",
                         on_epoch=None if setup.has_codebooks else on_epoch, progress=progress)
    setup.finalize()
    if log is not None and test is not None:
        log(f"finalized (weights exactly on codebooks / centroids / masks): test acc "
            f"{module_accuracy(setup.module, test):.4f}")
    return history


def finetune_graph(graph: Graph, recipe: Recipe, train: Dataset, *, test: Dataset | None = None,
                   epochs: int | None = None, lr: float | None = None, batch_size: int = DEFAULT_BATCH,
                   beta: float | None = None, recluster_every: int | None = None,
                   seed: int = 0, log: Log | None = print, augment: Callable | None = None,
                   progress: ProgressFactory | None = None, unmatched: Unmatched = "warn", **options: Any) -> Graph:
    """Fine-tune an (optimised) graph for ``recipe``; returns a new Graph whose weights sit exactly
    on what ``compress(graph, recipe)`` stores (codebooks, NNM centroids, zeros, fp16), so
    compressing it adds no error.

    ``train`` / ``test`` are Datasets (x float32 NCHW, y int labels). The loss is cross-entropy on
    the graph's first output mixed with knowledge distillation from the starting graph
    (``distill``). NNM layers train under CPT; pruned layers keep their starting magnitude mask;
    clustered layers first retrain as masked dense weights for ``cluster_after`` of the epochs
    (Han et al.'s prune-retrain), then k-means fixes their indices and only the codebooks train
    (at ``codebook_lr``). ``options``: the other :class:`FinetuneConfig` fields (optimizer,
    weight_decay, label_smoothing, distill, temperature, beta_warmup, kmeans_iters, n_init,
    cluster_after, codebook_lr).
    ``augment(x, generator)`` transforms each training batch. Deterministic for a given ``seed``;
    ``log`` gets one line per epoch (None: silent); ``progress(label)`` a callback per epoch for
    its batches (:func:`edgesdk.progress.transient` draws bars). ``unmatched``: what a recipe
    pattern matching no layer gives ("warn", "error", "ignore"). The model (one input, class
    scores out), the datasets, the settings and the recipe are all checked before training starts.
    ``epochs`` / ``lr`` / ``beta`` / ``recluster_every`` default to DEFAULT_EPOCHS, DEFAULT_LR, ...

    A recipe with ``lq_bits`` goes to LQ-Nets training instead
    (:func:`edgesdk.compress.lq_train.lq_finetune_graph`, its own epochs / lr defaults; ``beta`` and
    the codebook options are refused there), and the graph returned is already encoded: LQ codes
    and LQQuantize nodes, to pack as it stands (``pack_model(..., graph=...)``), not to ``compress``.
    """
    from .lq_train import DEFAULT_LQ_EPOCHS, DEFAULT_LQ_LR, lq_finetune_graph, uses_lq
    if uses_lq(recipe):  # LQ-Nets training: returns the encoded graph (LQ codes + LQQuantize nodes)
        return lq_finetune_graph(graph, recipe, train, test=test, epochs=DEFAULT_LQ_EPOCHS if epochs is None else epochs,
                                 lr=DEFAULT_LQ_LR if lr is None else lr, batch_size=batch_size, seed=seed, log=log,
                                 augment=augment, progress=progress, unmatched=unmatched, beta=beta,
                                 recluster_every=recluster_every, **options)
    cfg = FinetuneConfig(epochs=DEFAULT_EPOCHS if epochs is None else epochs, lr=DEFAULT_LR if lr is None else lr,
                         batch_size=batch_size, beta=DEFAULT_BETA if beta is None else beta,
                         recluster_every=DEFAULT_RECLUSTER_EVERY if recluster_every is None else recluster_every,
                         **options)
    check_trainable(graph, train, test)
    torch.manual_seed(seed)
    setup = FinetuneSetup(graph, recipe, seed=seed, cluster_now=False, unmatched=unmatched)
    if log is not None:
        log("fine-tuning: " + setup.summary())
    if not setup.trainable_parameters() and not setup.has_codebooks:
        raise EdgeSDKError("the graph has no trainable Conv/Gemm weights to fine-tune")
    gen = torch.Generator().manual_seed(seed)
    _fit(setup, _dataset_batches(train, cfg.batch_size, gen, augment),
         math.ceil(len(train) / cfg.batch_size), cfg, test, log, progress)
    return setup.graph()


def check_trainable(graph: Graph, train: Dataset, test: Dataset | None = None) -> None:
    """One-line errors, before any training, for what :func:`finetune_graph` cannot train: a model
    without exactly one input (a Dataset feeds one array), samples of another shape than that
    input, labels outside the first output's classes."""
    if len(graph.inputs) != 1:
        raise UnsupportedModelError(
            f"fine-tuning feeds a dataset's x to one model input, but {graph.name!r} has {len(graph.inputs)} "
            f"({', '.join(graph.inputs) or 'none'}); pack it without fine-tuning (edgesdk pack), or fine-tune "
            "a one-input torch.nn.Module with edgesdk.compress.finetune.finetune_module")
    shape = graph.tensors[graph.inputs[0]].shape
    classes = int(np.prod(graph.tensors[graph.outputs[0]].shape[1:]))
    for data in (train, test):
        if data is None:
            continue
        if tuple(data.x.shape[1:]) != tuple(shape[1:]):
            raise DatasetError(f"dataset {data.name!r} samples have shape {tuple(data.x.shape[1:])} but the model's "
                               f"input {graph.inputs[0]!r} takes {tuple(shape[1:])} (batch {shape[0]})")
        if len(data) and (int(data.y.min()) < 0 or int(data.y.max()) >= classes):
            raise DatasetError(f"dataset {data.name!r} has labels {int(data.y.min())}..{int(data.y.max())} but the "
                               f"model's output {graph.outputs[0]!r} scores {classes} classes (0..{classes - 1})")
    if len(train) == 0:
        raise DatasetError(f"training dataset {train.name!r} is empty")


def finetune_module(module: nn.Module, loader: Iterable, recipe: Recipe, *, epochs: int = DEFAULT_EPOCHS,
                    lr: float = DEFAULT_LR, test: Dataset | None = None, beta: float = DEFAULT_BETA,
                    recluster_every: int = DEFAULT_RECLUSTER_EVERY, sample_input: torch.Tensor | None = None,
                    seed: int = 0, log: Log | None = print, progress: ProgressFactory | None = None,
                    **options: Any) -> Graph:
    """Fine-tune a user's ``nn.Module`` for ``recipe`` and return the compressible Graph.

    The module is exported first (eval mode, :func:`module_to_graph`, so BatchNorm is folded the
    way ``compress`` will see it and Dropout is gone) and its Conv/Gemm nodes are renamed after
    the module's own names: node ``features.0`` with tensors ``features.0.weight`` /
    ``features.0.bias``. Recipe patterns therefore match parameter names, and the returned graph
    keeps them, so ``compress(graph, recipe)`` finds the same layers. ``loader`` yields ``(x, y)``
    batches (a DataLoader works) and is iterated once per epoch; the module itself is not modified.
    ``options`` as for :func:`finetune_graph`.
    """
    from .lq_train import uses_lq
    if uses_lq(recipe):
        raise InputError("LQ recipes (lq_bits) train from a Dataset: export the module (torch_bridge.module_to_graph) "
                         "and call finetune_graph, which returns the encoded graph")
    cfg = FinetuneConfig(epochs=epochs, lr=lr, beta=beta, recluster_every=recluster_every, **options)
    torch.manual_seed(seed)
    if sample_input is None:
        sample_input = torch.as_tensor(next(iter(loader))[0][:1], dtype=torch.float32)
    graph = module_to_graph(module, sample_input)
    rename_layers_after_module(graph, module)
    setup = FinetuneSetup(graph, recipe, seed=seed, cluster_now=False)
    if log is not None:
        log("fine-tuning: " + setup.summary())

    def batches(epoch: int):
        for xb, yb in loader:
            yield torch.as_tensor(xb, dtype=torch.float32), torch.as_tensor(yb, dtype=torch.int64)
    steps = len(loader) if hasattr(loader, "__len__") else sum(1 for _ in loader)
    _fit(setup, batches, steps, cfg, test, log, progress)
    return setup.graph()


def _module_path(node_name: str) -> str | None:
    """The dotted module path in a TorchScript-exported node name ("/features/features.1/block/
    block.1/fc1/Conv" -> "features.1.block.1.fc1"): a scope segment that extends the previous one
    ("features" -> "features.1") names a child of a container."""
    parts = [p for p in node_name.split("/") if p][:-1]
    if not parts:
        return None
    path, prev = [], None
    for seg in parts:
        if prev is not None and seg.startswith(prev + "."):
            path.append(seg[len(prev) + 1:])
        else:
            path.append(seg)
        prev = seg
    return ".".join(path)


def rename_layers_after_module(graph: Graph, module: nn.Module) -> dict[str, str]:
    """Rename each Conv/Gemm node of an exported graph to its module's path and its weight/bias
    tensors to ``<path>.weight`` / ``<path>.bias`` when the module is found and its weight shape
    matches. Returns {old node name: new}."""
    modules = dict(module.named_modules())
    taken_nodes = {n.name for n in graph.nodes}
    renamed = {}
    for node, _ in compressible_layers(graph):
        path = _module_path(node.name)
        sub = modules.get(path) if path else None
        weight = getattr(sub, "weight", None)
        if sub is None or not isinstance(weight, torch.Tensor) or tuple(weight.shape) != graph.tensors[node.inputs[1]].shape:
            continue
        if path in taken_nodes:
            continue
        for i, suffix in ((1, "weight"), (2, "bias")):
            old = node.input(i)
            new = f"{path}.{suffix}"
            if old and old != new and new not in graph.tensors:
                _rename_tensor(graph, old, new)
        renamed[node.name] = path
        taken_nodes.discard(node.name)
        node.name = path
        taken_nodes.add(path)
    return renamed


def _rename_tensor(graph: Graph, old: str, new: str) -> None:
    tensor = graph.tensors.pop(old)
    tensor.name = new
    graph.tensors[new] = tensor
    for node in graph.nodes:
        node.inputs = [new if i == old else i for i in node.inputs]
        node.outputs = [new if o == old else o for o in node.outputs]
    graph.inputs = [new if i == old else i for i in graph.inputs]
    graph.outputs = [new if o == old else o for o in graph.outputs]


# ---------------------------------------------------------------------------------------------
# Measuring: compress + evaluate, and the NNM/CPT sweep
# ---------------------------------------------------------------------------------------------
def compressed_accuracy(graph: Graph, recipe: Recipe, test: Dataset, *, seed: int = 0):
    """``compress`` a copy of ``graph`` and measure it on the reference backend. Returns
    (accuracy, reports, compressed graph)."""
    from ..evaluation import evaluate
    from ..runtime.session import Session
    g = graph.copy()
    reports = compress(g, recipe, seed=seed)
    return evaluate(Session(g), test).accuracy, reports, g


def weight_bytes(reports) -> tuple[int, int]:
    """(dense fp32 bytes, stored bytes) of the compressible weights, from compress()'s reports."""
    return sum(r.bytes_before for r in reports), sum(r.bytes_after for r in reports)


def classifier_layer(graph: Graph) -> str | None:
    """Node name of the last Conv/Gemm (the classifier, which NNM sweeps leave dense)."""
    layers = compressible_layers(graph)
    return layers[-1][0].name if layers else None


def nnm_recipe(rate: float, mode: str = "shared", *, skip: Sequence[str] = ()) -> Recipe:
    """NNM at ``rate`` on every Conv/Gemm except the ``skip`` node-name patterns."""
    return Recipe.from_dict({"default": {"nnm_rate": rate, "nnm_mode": mode},
                             "layers": [{"match": p, "skip": True} for p in skip]})


def nnm_cpt_table(graph: Graph, train: Dataset, test: Dataset, *, rates: Sequence[float] = (0.25, 0.5, 0.75),
                  modes: Sequence[str] = ("shared", "per_input_channel"), skip: Sequence[str] | None = None,
                  seed: int = 0, log: Log | None = None, **finetune_kwargs) -> list[dict]:
    """NNM accuracy with and without CPT (seed 003 §3.5's experiment), after ``compress`` on the
    reference backend. ``skip`` defaults to the classifier layer (NNM on a 10-way classifier
    merges classes). One row per (mode, rate): baseline, accuracy without CPT (post-hoc NNM of the
    given graph), with CPT, the loss of each in percentage points, and the fine-tuning time."""
    from ..evaluation import evaluate
    from ..runtime.session import Session
    baseline = evaluate(Session(graph), test).accuracy
    skip = [classifier_layer(graph)] if skip is None else list(skip)
    rows = []
    for mode in modes:
        for rate in rates:
            recipe = nnm_recipe(rate, mode, skip=skip)
            without, _, _ = compressed_accuracy(graph, recipe, test)
            t0 = time.perf_counter()
            tuned = finetune_graph(graph, recipe, train, seed=seed, log=None, **finetune_kwargs)
            seconds = time.perf_counter() - t0
            with_cpt, reports, _ = compressed_accuracy(tuned, recipe, test)
            row = {"mode": mode, "rate": rate, "baseline": baseline, "no_cpt": without, "cpt": with_cpt,
                   "loss_no_cpt_pp": 100 * (baseline - without), "loss_cpt_pp": 100 * (baseline - with_cpt),
                   "max_error_rms": max(r.error_rms for r in reports), "finetune_s": seconds,
                   "skip": skip}
            rows.append(row)
            if log is not None:
                log(f"{mode:18s} rate {rate:.2f}: no CPT {100 * without:6.2f}%  CPT {100 * with_cpt:6.2f}%  "
                    f"(baseline {100 * baseline:.2f}%, {seconds:.1f}s)")
    return rows


# Recipes for the default digits model (layer names of its optimised graph: /0/Conv 16x1x3x3,
# /4/Conv 32x16x3x3, /9/Gemm 64x128, /12/Gemm 10x64), as measured in the fine-tuning report.
DIGITS_RECIPES: dict[str, dict] = {
    # ~32x smaller weights, <= 1 pp after fine-tuning: per-layer prune + 3-bit fp16 codebooks
    "prune+cluster3-layer-32x": {
        "default": {"cluster_bits": 3, "fp16": True},
        "layers": [{"match": "/4/Conv", "prune": 0.85}, {"match": "/9/Gemm", "prune": 0.97},
                   {"match": "/12/Gemm", "prune": 0.5}]},
    # ~26x, the safer point
    "prune+cluster3-layer-26x": {
        "default": {"cluster_bits": 3, "fp16": True},
        "layers": [{"match": "/4/Conv", "prune": 0.8}, {"match": "/9/Gemm", "prune": 0.95},
                   {"match": "/12/Gemm", "prune": 0.5}]},
    # ~34x, still <= 1 pp on the seeds tried
    "prune+cluster3-layer-34x": {
        "default": {"cluster_bits": 3, "fp16": True},
        "layers": [{"match": "/4/Conv", "prune": 0.88}, {"match": "/9/Gemm", "prune": 0.97},
                   {"match": "/12/Gemm", "prune": 0.5}]},
    # ~37x, past the knee
    "prune+cluster-37x": {
        "default": {"cluster_bits": 3, "fp16": True},
        "layers": [{"match": "/4/Conv", "prune": 0.9}, {"match": "/9/Gemm", "prune": 0.97, "cluster_bits": 2},
                   {"match": "/12/Gemm", "prune": 0.7}]},
    # the 25x package target (file size against the ONNX file, <= 1 pp): gradual pruning to
    # 91/98/80% with 2-bit codebooks, 3-bit on the tiny first layer; fine-tune with
    # DIGITS_FINETUNE_OPTIONS (120 epochs: the higher sparsity needs the longer retraining)
    "prune+cluster2-25x": {
        "default": {"cluster_bits": 2, "fp16": True},
        "layers": [{"match": "/0/Conv", "cluster_bits": 3}, {"match": "/4/Conv", "prune": 0.91},
                   {"match": "/9/Gemm", "prune": 0.98}, {"match": "/12/Gemm", "prune": 0.8}]},
    # the literal "global pruning + 4-bit per-channel codebooks": per-channel codebooks cost
    # 2^b entries per output channel, which caps this small model near 10x
    "global-prune0.8+cluster4-channel": {
        "default": {"cluster_bits": 4, "per_channel": True, "fp16": True}, "global_prune": 0.8},
    # LQ-Nets (seed 002, issue 16; trained by edgesdk.compress.lq_train, measured by
    # tools/lq_accuracy.py): learned binary-coded weights per output channel and activations per
    # layer. The first layer's input - the image - stays float, as LQ-Nets does: 64 pixels into 16
    # channels cost little, and its levels would be fitted to pixel values, not features.
    # The last layer's input is quantized too (LQ-Nets keeps that layer in full precision): here
    # the classifier reads 64 ReLU features, and keeping them float measured no better at 2 bits
    # (seeds 0/1/2, lr 1e-3: 99.17/98.89/99.44% float, 99.17/99.72/98.89% quantized), so the
    # whole network after the image runs binary-coded products.
    "lq-2w2a": {"default": {"lq_bits": 2, "lq_act_bits": 2}, "layers": [{"match": "/0/Conv", "lq_act_bits": None}]},
    "lq-3w3a": {"default": {"lq_bits": 3, "lq_act_bits": 3}, "layers": [{"match": "/0/Conv", "lq_act_bits": None}]},
    # weights only: every layer's input float
    "lq-2w": {"default": {"lq_bits": 2}},
}


DIGITS_FINETUNE_OPTIONS: dict[str, Any] = {"epochs": 120}


def compression_table(graph: Graph, train: Dataset, test: Dataset, recipes: dict[str, Recipe | dict] | None = None,
                      *, seed: int = 0, log: Log | None = None, **finetune_kwargs) -> list[dict]:
    """For each named recipe: weight compression ratio (dense fp32 bytes / encoded bytes, from
    ``compress``'s reports), accuracy of ``compress`` alone and after :func:`finetune_graph`, both
    on the reference backend. ``recipes`` defaults to the codebook / NNM recipes of
    :data:`DIGITS_RECIPES` (the LQ ones train into encoded graphs: ``tools/lq_accuracy.py`` measures them)."""
    from ..evaluation import evaluate
    from ..runtime.session import Session
    from .lq_train import uses_lq
    baseline = evaluate(Session(graph), test).accuracy
    rows = []
    if recipes is None:
        recipes = {k: v for k, v in DIGITS_RECIPES.items() if not uses_lq(Recipe.from_dict(v))}
    for name, recipe in recipes.items():
        recipe = recipe if isinstance(recipe, Recipe) else Recipe.from_dict(recipe)
        plain, _, _ = compressed_accuracy(graph, recipe, test, seed=seed)
        t0 = time.perf_counter()
        tuned = finetune_graph(graph, recipe, train, seed=seed, log=None, **finetune_kwargs)
        seconds = time.perf_counter() - t0
        accuracy, reports, _ = compressed_accuracy(tuned, recipe, test, seed=seed)
        dense, stored = weight_bytes(reports)
        row = {"recipe": name, "ratio": dense / stored, "weight_bytes": stored, "dense_bytes": dense,
               "baseline": baseline, "compress_only": plain, "finetuned": accuracy,
               "loss_pp": 100 * (baseline - accuracy), "max_error_rms": max(r.error_rms for r in reports),
               "finetune_s": seconds, "layers": [(r.name, r.encoding, r.bytes_after) for r in reports]}
        rows.append(row)
        if log is not None:
            log(f"{name:34s} {row['ratio']:5.1f}x ({stored} B): compress only {100 * plain:6.2f}%  "
                f"fine-tuned {100 * accuracy:6.2f}%  (baseline {100 * baseline:.2f}%, {seconds:.1f}s)")
    return rows
