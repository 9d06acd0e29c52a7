"""The accuracy budget: choose each layer's precision and compression from measured sensitivity.

    edgesdk pack MODEL -o out.edgepkg --max-drop PP --calib DATA [--eval DATA] [--objective size|latency]

No recipe is written by hand. For every compressible layer (Conv, Gemm) and every choice in
:data:`CHOICES` (fp32, fp16, int8, k-means codebooks of 1-8 bits, magnitude pruning with 2-5 bit
codebooks) the search

1. measures the choice alone: that layer compressed (or quantized), every other layer fp32; its
   cost is the stored weight bytes (``size``) or the layer's measured time on the target backend
   (``latency``), its damage the share of top-1 predictions it changes on the calibration
   samples plus a small multiple of the KL divergence of the class probabilities from fp32.
   Damage from different layers adds up nearly independently, which is what makes per-layer
   measurements worth combining;
2. combines them as a Lagrangian relaxation (HAWQ-V3 / "mixed precision as a knapsack"): for a
   multiplier ``lam`` every layer takes the choice minimising ``cost + lam * noise``; sweeping
   ``lam`` over all its breakpoints gives the lower convex hull of (total cost, total noise)
   plans, cheapest first;
3. measures real accuracy, not the proxy: a bisection over that ordered list finds the cheapest
   plan whose top-1 accuracy on the evaluation data fell by at most ``max_drop`` percentage
   points, then a greedy pass tries each layer's next cheaper choice and keeps every step that
   still holds the budget.

The plan is a :class:`~edgesdk.compress.recipe.Recipe` (one ``layers`` entry per layer, plus the
calibration settings), so ``edgesdk pack --recipe plan.json --calib DATA`` reproduces the package
byte for byte. Without ``--eval`` the accuracy is measured on the calibration data: against its
labels when it has them, else against the fp32 model's own top-1 predictions (the drop is then the
share of predictions that changed, which bounds the accuracy change from above).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from ..datasets import Dataset
from ..errors import InputError
from ..graph import Graph
from .apply import compress, compressible_layers
from .recipe import LayerSettings, Recipe

Progress = Callable[[int, int, str], None]
OBJECTIVES = ("size", "latency")
PRUNE_LEVELS = (0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)
CALIBRATION_SAMPLES = 64  # calibration samples the int8 ranges come from (as pack --int8)
SENSITIVITY_SAMPLES = 512  # calibration samples each layer's damage is measured on
KL_WEIGHT = 0.01  # damage = share of top-1 predictions changed + KL_WEIGHT * KL (ties among zero flips)
SWAP_GIVE_BACK = 0.25  # a swap's dearer layer must take back at least this share of the other's damage
REFINE_STEPS_PER_LAYER = 16  # greedy refinement: measured evaluations per layer, at most


@dataclass(frozen=True)
class Choice:
    """One way to store (and run) a layer: a name for the plan table and its recipe settings."""
    name: str
    settings: Mapping[str, Any]

    @property
    def family(self) -> str:
        """What decides the layer's speed: the kernel it runs on ("fp32" also for fp16 storage,
        which the backends widen once at load)."""
        if self.settings.get("int8"):
            return "int8"
        if self.settings.get("prune"):
            return "sparse"
        if self.settings.get("cluster_bits"):
            return "codebook"
        return "fp32"

    @property
    def storage(self) -> str:
        """How the weights are stored: the speed family, with fp16 told apart from fp32."""
        return "fp16" if self.family == "fp32" and self.settings.get("fp16") else self.family


def _choices() -> tuple[Choice, ...]:
    out = [Choice("fp32", {}), Choice("fp16", {"fp16": True}), Choice("int8", {"int8": True})]
    out += [Choice(f"{b}-bit codebook", {"cluster_bits": b, "fp16": True}) for b in range(8, 0, -1)]
    out += [Choice(f"prune {p:.0%} + {b}-bit", {"prune": p, "cluster_bits": b, "fp16": True})
            for p in PRUNE_LEVELS for b in (5, 4, 3, 2)]
    return tuple(out)


CHOICES = _choices()
# The latency objective: choices that run on different kernels (storage widths within a kernel
# family cost the same time, so one codebook width and one pruning level speak for the rest).
LATENCY_CHOICES = tuple(c for c in CHOICES if c.name in (
    "fp32", "fp16", "int8", "8-bit codebook", "4-bit codebook", "prune 50% + 4-bit", "prune 80% + 4-bit"))
_PLAIN = {key: getattr(LayerSettings(), key) for key in ("prune", "cluster_bits", "fp16", "int8", "init")}
FP32 = CHOICES[0]
# A representative of each storage kind, packaged once to measure what it adds besides weights.
_STORAGE_PROBES = {"fp32": FP32, "fp16": CHOICES[1], "int8": CHOICES[2],
                   "codebook": next(c for c in CHOICES if c.name == "4-bit codebook"),
                   "sparse": next(c for c in CHOICES if c.name == "prune 80% + 4-bit")}
# A representative of each speed family, profiled once for the latency objective.
_FAMILY_PROBES = {"fp32": FP32, "int8": CHOICES[2], "codebook": Choice("4-bit codebook", {"cluster_bits": 4}),
                  "sparse": Choice("prune 80% + 4-bit", {"prune": 0.8, "cluster_bits": 4})}


@dataclass
class Option:
    """A choice measured on one layer alone."""
    choice: Choice
    bytes: int  # stored weight bytes
    noise: float  # damage (see _damage) with only this layer changed
    latency_ms: float = 0.0  # the layer's time on the target backend (latency objective)
    overhead: float = 0.0  # package bytes the storage kind adds per layer besides the weights
    init: str = "linear"  # k-means initialisation of codebook choices (the closer of the two)

    @property
    def settings(self) -> dict[str, Any]:
        """The layer's recipe settings."""
        extra = {"init": self.init} if self.init != "linear" and self.choice.settings.get("cluster_bits") else {}
        return {**self.choice.settings, **extra}

    def cost(self, objective: str) -> float:
        size = self.bytes + self.overhead
        # latency ties (all codebook widths run the same kernel) go to the smaller layer
        return self.latency_ms + 1e-9 * size if objective == "latency" else float(size)


@dataclass
class Layer:
    """One compressible layer and its measured options."""
    node: str
    weight: str
    op: str
    params: int
    options: list[Option] = field(default_factory=list)

    def option(self, name: str) -> Option:
        return next(o for o in self.options if o.choice.name == name)


@dataclass
class BudgetResult:
    """The plan the search chose and what it measured."""
    recipe: Recipe
    plan: dict[str, Option]  # node name -> chosen option
    layers: list[Layer]
    objective: str
    max_drop_pp: float
    baseline: float  # top-1 on the evaluation data, fp32
    accuracy: float  # top-1 of the chosen plan
    dataset: str
    evaluations: int  # plans whose accuracy was measured
    seconds: float
    data: Dataset = field(repr=False, compare=False)  # what the accuracy was measured on

    @property
    def drop_pp(self) -> float:
        return 100 * (self.baseline - self.accuracy)

    @property
    def weight_bytes(self) -> int:
        return sum(o.bytes for o in self.plan.values())

    @property
    def fp32_bytes(self) -> int:
        return sum(4 * layer.params for layer in self.layers)

    def rows(self) -> list[dict[str, Any]]:
        """One record per layer: the choice, its bytes, its measured damage alone (see _damage)."""
        return [{"layer": layer.node, "op": layer.op, "params": layer.params,
                 "choice": self.plan[layer.node].choice.name, "bytes": self.plan[layer.node].bytes,
                 "damage": float(f"{self.plan[layer.node].noise:.3g}"),
                 "latency_ms": round(self.plan[layer.node].latency_ms, 4)} for layer in self.layers]

    def to_dict(self) -> dict[str, Any]:
        return {"objective": self.objective, "max_drop_pp": self.max_drop_pp, "dataset": self.dataset,
                "baseline_accuracy": self.baseline, "accuracy": self.accuracy, "drop_pp": self.drop_pp,
                "weight_bytes": self.weight_bytes, "fp32_weight_bytes": self.fp32_bytes,
                "evaluations": self.evaluations, "seconds": round(self.seconds, 2), "layers": self.rows(),
                "recipe": self.recipe.to_dict()}


# -- the search -------------------------------------------------------------------------------------
def plan_within_budget(source, calibration: np.ndarray, max_drop: float, *, eval_data: Dataset | None = None,
                       objective: str = "size", method: str = "minmax", samples: int = CALIBRATION_SAMPLES,
                       sensitivity_samples: int = SENSITIVITY_SAMPLES, backend: str = "auto", input_shapes=None,
                       outputs: list[str] | None = None, progress: Progress | None = None) -> BudgetResult:
    """The smallest (``objective="size"``) or fastest (``"latency"``) per-layer plan for the model
    ``source`` (what :func:`edgesdk.compress.pack_model` takes) whose measured top-1 accuracy on
    ``eval_data`` (default: the calibration data, see the module docstring) is at most
    ``max_drop`` percentage points below fp32. ``calibration`` (N, ...) inputs: the first
    ``samples`` set int8 ranges, the first ``sensitivity_samples`` measure each layer's damage.
    ``progress(done, total, stage)`` reports each stage; ``input_shapes`` and ``outputs`` as for
    ``pack_model``."""
    started = time.perf_counter()
    _check_arguments(max_drop, objective, {"samples": samples, "sensitivity_samples": sensitivity_samples},
                     calibration)
    everything = np.asarray(calibration, np.float32)
    calibration = everything[:samples]
    graph, batched = _graphs(source, len(calibration), input_shapes, outputs)
    search = _Search(graph, batched, calibration, everything[:sensitivity_samples], method, backend, objective,
                     progress)
    data = eval_data if eval_data is not None else search.own_labels(everything)
    search.measure_options()
    baseline = search.accuracy(None, data)
    plans = search.hull_plans()
    best, accuracy = search.cheapest_within(plans, data, baseline, max_drop)
    best, accuracy = search.refine(best, accuracy, data, baseline, max_drop)
    if objective == "latency":
        best, accuracy = search.fastest_whole(best, accuracy, data, baseline, max_drop)
    recipe = plan_recipe(best, method, min(samples, len(calibration)))
    return BudgetResult(recipe, best, search.layers, objective, max_drop, baseline, accuracy, data.name,
                        search.evaluations, time.perf_counter() - started, data)


def pack_within_budget(source, output, max_drop: float, calibration: np.ndarray, *,
                       eval_data: Dataset | None = None, objective: str = "size", method: str = "minmax",
                       samples: int = CALIBRATION_SAMPLES, sensitivity_samples: int = SENSITIVITY_SAMPLES,
                       backend: str = "auto", input_shapes=None, outputs: list[str] | None = None,
                       progress: Progress | None = None):
    """:func:`plan_within_budget`, then the package of its recipe, written by
    :func:`edgesdk.compress.pack_model` exactly as ``pack --recipe`` would (which measures the
    accuracy once more on the packed model and refuses to write it past the budget). Returns
    ``(PackResult, BudgetResult)``."""
    from ..pack import pack_model
    budget = plan_within_budget(source, calibration, max_drop, eval_data=eval_data, objective=objective,
                                method=method, samples=samples, sensitivity_samples=sensitivity_samples,
                                backend=backend, input_shapes=input_shapes,
                                outputs=outputs, progress=progress)
    int8 = any(option.choice.family == "int8" for option in budget.plan.values())
    packed = pack_model(source, output, budget.recipe, data=budget.data, max_drop=max_drop,
                        input_shapes=input_shapes, outputs=outputs, progress=progress, unmatched="error",
                        calibration=np.asarray(calibration, np.float32) if int8 else None)
    return packed, budget


def plan_recipe(plan: Mapping[str, Option], method: str, samples: int) -> Recipe:
    """The recipe that reproduces ``plan``, written short (it travels inside the package): the
    most common choice is the default, every other layer an exact-name entry with the settings
    that differ from it."""
    def key(option: Option) -> tuple:
        return tuple(sorted(option.settings.items()))
    counts: dict[tuple, int] = {}
    for option in plan.values():
        counts[key(option)] = counts.get(key(option), 0) + 1
    common = max(plan.values(), key=lambda o: counts[key(o)]).settings if plan else {}
    default = {**_PLAIN, **common}
    entries = []
    for node, option in plan.items():
        full = {**_PLAIN, **option.settings}
        changed = {k: v for k, v in full.items() if default[k] != v}
        if changed:
            entries.append((_literal(node), changed))
    int8 = any(option.choice.family == "int8" for option in plan.values())
    return Recipe(LayerSettings(**common), tuple(entries),
                  calibration={"method": method, "samples": samples} if int8 else None)


def _literal(name: str) -> str:
    """A shell pattern matching exactly ``name`` (fnmatch has no escape character: brackets do it)."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def _check_arguments(max_drop: float, objective: str, counts: dict[str, int], calibration) -> None:
    if isinstance(max_drop, bool) or not isinstance(max_drop, (int, float)) or not 0 <= max_drop <= 100:
        raise InputError(f"max_drop must be a number of percentage points in [0, 100], got {max_drop!r}")
    if objective not in OBJECTIVES:
        raise InputError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    for name, count in counts.items():
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise InputError(f"{name} must be a positive integer, got {count!r}")
    if calibration is None or len(calibration) == 0:
        raise InputError("the accuracy budget needs calibration inputs (--calib DATA) to measure each layer on")


class _Search:
    """The measurements behind :func:`plan_within_budget` (one graph, one backend)."""

    def __init__(self, graph: Graph, batched: Graph, calibration: np.ndarray, probe: np.ndarray, method: str,
                 backend: str, objective: str, progress: Progress | None) -> None:
        from ..quant.calibrate import METHODS
        if method not in METHODS:
            raise InputError(f"calibration method {method!r} is not one of {', '.join(METHODS)}")
        self.graph, self.batched, self.method, self.backend, self.objective = graph, batched, method, backend, objective
        self.progress = progress
        self.calibration = calibration  # int8 ranges
        self.probe = probe  # damage
        self.nodes = {node.name: node for node in graph.nodes}
        self.layers = [Layer(node.name, weight, node.op, int(graph.tensors[weight].size))
                       for node, weight in compressible_layers(graph)]
        if not self.layers:
            raise InputError(f"{graph.name!r} has no Conv or Gemm layer with constant weights: "
                             "there is nothing for the accuracy budget to choose")
        self.evaluations = 0
        self.reference = self._outputs(self.batched)

    # -- running graphs
    def _session(self, graph: Graph):
        from ..runtime.session import Session
        return Session(graph, backend=self.backend, optimize=False)

    def _outputs(self, graph: Graph) -> np.ndarray:
        """The class probabilities (N, classes) the graph gives the probe samples: its first
        output (what top-1 accuracy reads), through a softmax unless it already is one."""
        with self._session(graph) as sess:
            name = sess.input_names[0]
            batch = sess.input_shapes[name][0]
            x = _as_model_input(self.probe, sess.input_shapes[name])
            scores = []
            for start in range(0, len(x), batch):
                chunk = x[start:start + batch]
                real = len(chunk)
                if real < batch:  # a fixed batch: pad, then drop the padding's outputs
                    chunk = np.concatenate([chunk, np.zeros((batch - real,) + chunk.shape[1:], chunk.dtype)])
                out = np.asarray(sess.run({name: chunk})[sess.output_names[0]], np.float64).reshape(batch, -1)
                scores.append(out[:real])
        return _probabilities(np.concatenate(scores))

    def own_labels(self, x: np.ndarray) -> Dataset:
        """All calibration inputs ``x`` labelled by the fp32 model's top-1 (no labelled data given)."""
        from ..evaluation import predictions
        x = _as_model_input(x, self.batched.tensors[self.batched.inputs[0]].shape)
        with self._session(self.batched) as sess:
            labels = predictions(sess, x)
        return Dataset("calibration (fp32 top-1 as labels)", x, labels)

    def build(self, plan: Mapping[str, Option] | None, graph: Graph | None = None) -> Graph:
        """``graph`` (default: the batched search graph) with ``plan`` applied, as pack_model would."""
        from ..quant.ptq import quantize_graph
        g = (graph or self.batched).copy()
        if not plan:
            return g
        recipe = plan_recipe(self._complete(plan), self.method, len(self.calibration))
        compress(g, recipe, unmatched="ignore", seed=0)
        int8 = {node for node, option in plan.items() if option.choice.family == "int8"}
        if int8:
            g, _ = quantize_graph(g, self.calibration, method=self.method, backend=self.backend, layers=int8)
        return g

    def _complete(self, plan: Mapping[str, Option]) -> dict[str, Option]:
        """``plan`` with every layer it does not name left fp32 (a recipe covers all layers)."""
        return {layer.node: plan.get(layer.node) or Option(FP32, 4 * layer.params, 0.0) for layer in self.layers}

    def accuracy(self, plan: Mapping[str, Option] | None, data: Dataset) -> float:
        from ..evaluation import evaluate
        self.evaluations += 1
        with self._session(self.build(plan)) as sess:
            return evaluate(sess, data).accuracy

    # -- step 1: every choice on every layer alone
    def measure_options(self) -> None:
        latency = self._family_latencies() if self.objective == "latency" else {}
        choices = LATENCY_CHOICES if self.objective == "latency" else CHOICES
        total, done = len(self.layers) * len(choices), 0
        for layer in self.layers:
            for choice in choices:
                self._report(done, total, f"sensitivity {layer.node}: {choice.name}")
                done += 1
                option = self._measure(layer, choice)
                if option is not None:
                    option.latency_ms = latency.get(choice.family, {}).get(layer.node, 0.0)
                    layer.options.append(option)
        self._report(total, total, "sensitivity")
        overheads = self._storage_overheads()
        for layer in self.layers:
            for option in layer.options:
                option.overhead = overheads.get(option.choice.storage, 0.0)

    def _storage_overheads(self) -> dict[str, float]:
        """Package bytes per layer each storage kind costs besides its weights, against fp32:
        int8 brings quantize/dequantize nodes and scale and zero-point constants, encoded
        tensors their own records. Measured once per kind by writing the package with every
        layer in that kind (the weights' own bytes are known per option)."""
        import tempfile
        from pathlib import Path

        from ..package import save_package
        sizes: dict[str, float] = {}
        with tempfile.TemporaryDirectory() as tmp:
            for i, (kind, probe) in enumerate(_STORAGE_PROBES.items()):
                self._report(i, len(_STORAGE_PROBES), f"package overhead of {kind}")
                plan = {layer.node: _option_or_fp32(layer, probe) for layer in self.layers}
                path = Path(tmp) / f"{kind}.edgepkg"
                save_package(self.build(plan, self.graph), path)
                weights = sum(o.bytes for o in plan.values())
                sizes[kind] = (path.stat().st_size - weights) / len(self.layers)
        return {kind: size - sizes["fp32"] for kind, size in sizes.items()}

    def _measure(self, layer: Layer, choice: Choice) -> Option | None:
        fp32_bytes = 4 * layer.params
        if choice is FP32:
            return Option(choice, fp32_bytes, 0.0)
        if choice.family == "int8":
            plan = {layer.node: Option(choice, 0, 0.0)}
            nbytes = layer.params + 4 * self._out_channels(layer)  # int8 weights + fp32 scale per channel
            return self._damaged(Option(choice, nbytes, 0.0), self.build(plan))
        candidates = []
        for init in ("linear", "kmeans++") if choice.settings.get("cluster_bits") else ("linear",):
            option = Option(choice, 0, 0.0, init=init)
            g = self.batched.copy()
            recipe = plan_recipe(self._complete({layer.node: option}), self.method, len(self.calibration))
            report = next(r for r in compress(g, recipe, unmatched="ignore", seed=0) if r.name == layer.node)
            if report.bytes_after >= fp32_bytes or report.encoding.startswith("dense"):
                return None  # kept dense: no better than fp32
            option.bytes = report.bytes_after
            candidates.append((report.error_rms, option, g))
        # Both k-means initialisations, the one closer to the weights kept: linear (Han et al.)
        # keeps the large rare weights, k-means++ fits the bulk; which wins depends on the layer.
        _, option, g = min(candidates, key=lambda c: c[0])
        return self._damaged(option, g)

    def _damaged(self, option: Option, built: Graph) -> Option:
        noise = _damage(self.reference, self._outputs(built))
        option.noise = noise if math.isfinite(noise) else math.inf
        return option

    def _out_channels(self, layer: Layer) -> int:
        node = self.nodes[layer.node]
        shape = self.graph.tensors[layer.weight].shape
        return shape[0] if node.op == "Conv" or node.attrs.get("transB") else shape[-1]

    def _family_latencies(self) -> dict[str, dict[str, float]]:
        """Per-layer milliseconds on the target backend, batch 1, with every layer in one family."""
        from ..runtime.session import Session
        single = self.graph
        out: dict[str, dict[str, float]] = {}
        for i, (family, probe) in enumerate(_FAMILY_PROBES.items()):
            self._report(i, len(_FAMILY_PROBES), f"timing {family} layers")
            plan = {layer.node: Option(probe, 0, 0.0) for layer in self.layers}
            graph = self.build(plan, single) if family != "fp32" else single.copy()
            with Session(graph, backend=self.backend, optimize=False) as sess:
                name = sess.input_names[0]
                x = _as_model_input(self.calibration[:1], sess.input_shapes[name])
                for _ in range(3):
                    sess.run({name: x})
                reports = [sess.profile({name: x}) for _ in range(5)]
            segments = [_segment_ms(r, {layer.node for layer in self.layers}) for r in reports]
            out[family] = {layer.node: float(np.median([seg.get(layer.node, 0.0) for seg in segments]))
                           for layer in self.layers}
        return out

    def end_to_end_ms(self, plan: Mapping[str, Option]) -> float:
        """Median milliseconds of a whole run of ``plan`` on the target backend, batch as packed."""
        from ..profile.latency import time_calls
        from ..runtime.session import Session
        with Session(self.build(plan, self.graph), backend=self.backend, optimize=False) as sess:
            name = sess.input_names[0]
            feed = {name: _as_model_input(self.calibration[:1], sess.input_shapes[name])}
            return 1e3 * float(np.median(time_calls(lambda: sess.run(feed), warmup=3, min_time_s=0.3)))

    def fastest_whole(self, plan: dict[str, Option], accuracy: float, data: Dataset, baseline: float,
                      max_drop: float) -> tuple[dict[str, Option], float]:
        """Per-layer times miss the conversions a mixed plan adds at each int8/float border (on a
        tiny model one costs more than the int8 layer saves): time the whole plan against the
        same plan with its int8 layers in float, fp16 everywhere and fp32 everywhere, and keep
        the fastest that holds the budget (fp32 always does: never slower than the source)."""
        by_name = lambda name: {layer.node: next((o for o in layer.options if o.choice.name == name),  # noqa: E731
                                                 layer.option("fp32")) for layer in self.layers}
        candidates = [plan, self.without_int8(plan), by_name("fp16"), by_name("fp32")]
        times = [self.end_to_end_ms(c) for c in candidates]
        size = lambda i: sum(o.bytes + o.overhead for o in candidates[i].values())  # noqa: E731
        # within timing noise (5%) of the fastest, the smaller package first
        fast = sorted((i for i in range(len(candidates)) if times[i] <= 1.05 * min(times)), key=size)
        for i in fast + sorted((i for i in range(len(candidates)) if i not in fast), key=times.__getitem__):
            if i == 0:
                return plan, accuracy
            holds, candidate_accuracy = self._holds(candidates[i], data, baseline, max_drop)
            if holds:
                return candidates[i], candidate_accuracy
        return plan, accuracy

    def without_int8(self, plan: Mapping[str, Option]) -> dict[str, Option]:
        """``plan`` with its int8 layers stored fp16 instead (the float kernels, nearly exact)."""
        return {node: next((o for o in self._layer(node).options if o.choice.name == "fp16"), self._layer(node).option("fp32"))
                if option.choice.family == "int8" else option for node, option in plan.items()}

    def _layer(self, node: str) -> Layer:
        return next(layer for layer in self.layers if layer.node == node)

    # -- step 2: the Lagrangian sweep
    def hull_plans(self) -> list[dict[str, Option]]:
        """Plans from cheapest to dearest along the lower convex hull of (cost, noise)."""
        objective = self.objective
        lams = {0.0, math.inf}
        for layer in self.layers:
            finite = [o for o in layer.options if math.isfinite(o.noise)]
            for a in finite:
                for b in finite:
                    if a.cost(objective) < b.cost(objective) and a.noise > b.noise:
                        lams.add((b.cost(objective) - a.cost(objective)) / (a.noise - b.noise))
        plans: dict[tuple, dict[str, Option]] = {}
        for lam in sorted(lams):
            plan = {layer.node: self._best(layer, lam) for layer in self.layers}
            plans.setdefault(tuple(o.choice.name for o in plan.values()), plan)
        ordered = sorted(plans.values(), key=lambda p: (self._cost(p), -self._noise(p)))
        return ordered

    def _best(self, layer: Layer, lam: float) -> Option:
        objective = self.objective
        if math.isinf(lam):  # only exactness counts: the least noise, then the cheapest
            return min(layer.options, key=lambda o: (o.noise, o.cost(objective)))
        return min(layer.options, key=lambda o: (o.cost(objective) + lam * o.noise if math.isfinite(o.noise)
                                                 else math.inf, o.noise))

    def _cost(self, plan: Mapping[str, Option]) -> float:
        return sum(o.cost(self.objective) for o in plan.values())

    def _noise(self, plan: Mapping[str, Option]) -> float:
        return sum(o.noise for o in plan.values())

    # -- step 3: measured accuracy
    def _holds(self, plan, data: Dataset, baseline: float, max_drop: float) -> tuple[bool, float]:
        accuracy = self.accuracy(plan, data)
        return 100 * (baseline - accuracy) <= max_drop + 1e-9, accuracy

    def cheapest_within(self, plans: list[dict[str, Option]], data: Dataset, baseline: float, max_drop: float
                        ) -> tuple[dict[str, Option], float]:
        """Bisection for the cheapest plan holding the budget (the dearest is exact: it holds)."""
        lo, hi = 0, len(plans) - 1
        fits = {}
        steps = max(1, math.ceil(math.log2(len(plans) + 1)))
        holds, accuracy = self._holds(plans[hi], data, baseline, max_drop)
        fits[hi] = accuracy
        if not holds:  # not even the most exact plan: everything fp32
            fp32 = {layer.node: layer.option("fp32") for layer in self.layers}
            return fp32, baseline
        step = 0
        while lo < hi:
            mid = (lo + hi) // 2
            step += 1
            self._report(step, steps, f"accuracy of plan {mid + 1}/{len(plans)}")
            holds, accuracy = self._holds(plans[mid], data, baseline, max_drop)
            if holds:
                hi, fits[mid] = mid, accuracy
            else:
                lo = mid + 1
        return plans[hi], fits[hi]

    def refine(self, plan: dict[str, Option], accuracy: float, data: Dataset, baseline: float, max_drop: float
               ) -> tuple[dict[str, Option], float]:
        """Local search from the bisection's plan. A step moves one layer to a cheaper choice, or
        swaps: one layer one choice dearer (less damage) and another cheaper, for a net saving
        (how a budget spent on one layer moves to another that uses it better). The step saving
        the most cost per unit of added KL is measured first; it is kept when the accuracy still
        holds, and a failed step is never retried. At most REFINE_STEPS_PER_LAYER measured steps
        per layer in all."""
        tries = REFINE_STEPS_PER_LAYER * len(self.layers)
        failed: set[tuple] = set()
        for attempt in range(tries):
            step = self._next_step(plan, failed)
            if step is None:
                break
            self._report(attempt, tries, "refining: " + ", ".join(f"{n} -> {o.choice.name}" for n, o in step))
            trial = {**plan, **dict(step)}
            holds, trial_accuracy = self._holds(trial, data, baseline, max_drop)
            if holds:
                plan, accuracy = trial, trial_accuracy
            else:
                failed.add(_step_key(step))
        self._report(tries, tries, "refined")
        return plan, accuracy

    def _next_step(self, plan: Mapping[str, Option], failed: set[tuple]) -> tuple[tuple[str, Option], ...] | None:
        """The untried step with the most cost saved per KL added (see :meth:`refine`)."""
        cost = lambda o: o.cost(self.objective)  # noqa: E731
        downs, ups = [], []
        for layer in self.layers:
            current = plan[layer.node]
            usable = [o for o in layer.options if math.isfinite(o.noise)]
            downs += [(layer.node, o, cost(current) - cost(o), o.noise - current.noise)
                      for o in usable if cost(o) < cost(current)]
            dearer = sorted((o for o in usable if cost(o) > cost(current) and o.noise < current.noise), key=cost)
            ups += [(layer.node, o, cost(current) - cost(o), o.noise - current.noise) for o in dearer[:3]]
        steps = [((node, option),) + (saved, added) for node, option, saved, added in downs]
        for up_node, up, up_saved, up_added in ups:
            for down_node, down, down_saved, down_added in downs:
                # a swap is worth measuring when it saves cost and the dearer layer gives back a
                # real share of the damage the cheaper one adds (else it is the single step again)
                if down_node != up_node and up_saved + down_saved > 0 and -up_added >= SWAP_GIVE_BACK * down_added:
                    steps.append(((up_node, up), (down_node, down), up_saved + down_saved, up_added + down_added))
        best, best_value = None, -math.inf
        for *changes, saved, added in steps:
            if _step_key(tuple(changes)) in failed:
                continue
            value = saved / max(added, 1e-9)
            if value > best_value:
                best, best_value = tuple(changes), value
        return best

    def _report(self, done: int, total: int, stage: str) -> None:
        if self.progress:
            self.progress(done, total, stage)


def _option_or_fp32(layer: Layer, choice: Choice) -> Option:
    """The layer's measured option for ``choice``, or fp32 when the choice does not apply to it."""
    return next((o for o in layer.options if o.choice.name == choice.name), layer.option("fp32"))


def _step_key(step) -> tuple:
    return tuple(sorted((node, option.choice.name) for node, option in step))


def _probabilities(scores: np.ndarray) -> np.ndarray:
    """Rows of class probabilities: ``scores`` as they are when they already are (a model ending
    in Softmax), else their softmax."""
    if scores.min() >= 0 and np.allclose(scores.sum(axis=1), 1.0, atol=1e-3):
        return scores
    shifted = np.exp(scores - scores.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def _damage(p: np.ndarray, q: np.ndarray) -> float:
    """How much a change hurts, from the fp32 probabilities ``p`` and the changed ones ``q``: the
    share of top-1 predictions that changed, plus KL_WEIGHT times the KL divergence. Flips are
    what accuracy counts (on digits, pruning FC1 80% moves KL more than a 1-bit codebook does but
    flips 3 predictions in 1437 against 11); KL orders the many choices that flip none."""
    if not np.all(np.isfinite(q)):
        return math.inf
    flips = float(np.mean(p.argmax(axis=1) != q.argmax(axis=1)))
    return flips + KL_WEIGHT * _kl_divergence(p, q)


def _kl_divergence(p: np.ndarray, q: np.ndarray) -> float:
    """Mean KL(p || q) over samples, in nats: how far a layer's change moves the model's
    predictive distribution. It follows accuracy more closely than output SNR does (a logit shift
    that keeps the winner far ahead costs little) and adds up over layers as well."""
    if not np.all(np.isfinite(q)):
        return math.inf
    tiny = 1e-12
    return float(np.mean(np.sum(p * (np.log(p + tiny) - np.log(q + tiny)), axis=1)))


def _segment_ms(report, layers: set[str]) -> dict[str, float]:
    """Each layer's time in a profile report with the ops that run after it up to the next layer
    (conversions, pools, activations: what choosing int8 or float for the layer brings with it);
    ops before the first layer count for the first layer."""
    out: dict[str, float] = {}
    current, pending = None, 0.0
    for record in report.ops:
        ms = record.device_ms if record.kernels else record.host_ms
        if record.node in layers:
            current = record.node
            out[current] = out.get(current, 0.0) + ms + pending
            pending = 0.0
        elif current is None:
            pending += ms
        else:
            out[current] += ms
    return out


def _graphs(source, n: int, input_shapes, outputs) -> tuple[Graph, Graph]:
    """The optimized model as packed (its own batch) and, for measuring, the same model with a
    batch of ``n`` when its batch axis is free (one run covers the samples; else the first)."""
    from ..loader import load_model
    from ..passes import optimize
    graph = load_model(source, input_shapes, outputs)
    optimize(graph)
    if input_shapes or len(graph.inputs) != 1 or isinstance(source, Graph):
        return graph, graph
    name = graph.inputs[0]
    try:
        batched = load_model(source, {name: (n,) + tuple(graph.tensors[name].shape[1:])}, outputs)
    except Exception:  # a fixed batch axis: measure sample by sample on the model as it is
        return graph, graph
    optimize(batched)
    return graph, batched


def _as_model_input(x: np.ndarray, shape) -> np.ndarray:
    """Samples (N, ...) shaped as the model input takes them ((N, 1, H, W) for (N, H, W))."""
    x = np.asarray(x, np.float32)
    if x.ndim == len(shape) - 1:
        x = x[:, None]
    return np.ascontiguousarray(x)
