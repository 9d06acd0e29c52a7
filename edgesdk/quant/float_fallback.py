"""Keep in float the quantized tensors that cost the output most, until int8 holds an SQNR target.

    edgesdk pack MODEL -o out.edgepkg --int8 --calib DATA --min-sqnr 30 [--eval DATA]

Some models lose more to 8 bits than their users accept (a ViT's attention outputs, MobileViT's
swish blocks, timm's MobileNetV3 with random weights: 16-28 dB against fp32), and a few of their
tensors carry most of that loss. The search measures, on the user's inputs and through the integer
model itself (not a float simulation of it):

1. each *unit* alone: one quantized activation tensor kept float, with every integer op that
   writes or reads it (so that tensor is never rounded and those ops' weights stay fp32). Its
   gain is the output noise it removes from the all-int8 model;
2. the units ranked by gain per multiply-accumulate moved to float (plus a floor for the
   conversions a float island adds), so cheap, damaging tensors go first;
3. a bisection over that ranking for the shortest prefix whose measured SQNR reaches the target.
   The all-float end always does (fp32 against itself), so the search always ends with a plan it
   measured, never an estimate.

Noise from different tensors adds up nearly independently (the accuracy budget,
``edgesdk.compress.budget``, rests on the same fact for layers), which is why one measurement per
unit ranks them; the bisection then checks the sums that the ranking only predicts. The budget
chooses per weighted layer by top-1 flips, for classifiers; this chooses per tensor by the SQNR of
every output, for any model (detectors, OCR, embeddings).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..errors import InputError
from ..graph import Graph

Progress = Callable[[int, int, str], None]
EVAL_SAMPLES = 16  # inputs each candidate plan is measured on (the first of the evaluation data)
# A unit's cost is the share of the model's multiply-accumulates it moves to float, but at least
# this much: each float island adds a DequantizeLinear and a QuantizeLinear, so a unit without MACs
# (a pool's or a reshape's tensor) is not free.
MIN_UNIT_COST = 0.002


@dataclass(frozen=True)
class FloatUnit:
    """One quantized tensor kept float, with the integer-capable ops that write or read it."""
    tensor: str
    nodes: frozenset[str]
    macs: int


@dataclass
class FallbackResult:
    """What :func:`choose_float_fallback` chose and measured."""
    target_db: float
    int8_sqnr_db: float  # every capable op in int8
    sqnr_db: float  # with ``keep_float`` in float, on the same inputs
    keep_float: list[str] = field(default_factory=list)  # node names, for ``quantize_graph(skip=...)``
    tensors: list[str] = field(default_factory=list)  # the tensors no longer quantized
    float_macs_share: float = 0.0  # of the model's multiply-accumulates, now run in float
    evaluations: int = 0
    samples: int = 0

    def to_dict(self) -> dict:
        return {"target_db": self.target_db, "int8_sqnr_db": _rounded(self.int8_sqnr_db),
                "sqnr_db": _rounded(self.sqnr_db), "keep_float": self.keep_float, "tensors": self.tensors,
                "float_macs_share": round(self.float_macs_share, 4), "evaluations": self.evaluations,
                "samples": self.samples}


def check_min_sqnr(value) -> float:
    """``value`` as a target in dB, or an :class:`InputError` saying what a valid one is."""
    try:
        db = float(value)
    except (TypeError, ValueError):
        db = math.nan
    if not math.isfinite(db) or not 0 < db <= 100:
        raise InputError(f"--min-sqnr is a target SQNR in dB against fp32, above 0 and at most 100 "
                         f"(30 is a common bar), got {value!r}")
    return db


def output_sqnr_db(reference: list[np.ndarray], approx: list[np.ndarray]) -> float:
    """SQNR in dB of ``approx`` against ``reference`` over every output element together; elements
    where the reference is NaN or infinite are left out (int8 cannot represent them)."""
    signal = noise = 0.0
    for ref, got in zip(reference, approx):
        ref = np.asarray(ref, np.float64)
        got = np.asarray(got, np.float64)
        finite = np.isfinite(ref)
        signal += float(np.sum(ref[finite] ** 2))
        err = got[finite] - ref[finite]
        if not np.all(np.isfinite(err)):  # NaN or infinity where fp32 is finite: as wrong as it gets
            return -math.inf
        noise += float(np.sum(err ** 2))
    if noise == 0:
        return math.inf
    return 10 * math.log10(signal / noise) if signal > 0 else -math.inf


def float_units(plan) -> list[FloatUnit]:
    """The distinct units of a :class:`~edgesdk.quant.ptq.QuantizationPlan`: one per quantized
    run-time tensor, merged where two tensors would keep the same ops float (a reshape's input and
    output)."""
    from ..runtime.cost import node_macs
    g = plan.graph
    producers, consumers = g.producers(), g.consumers()
    nodes = {n.name: n for n in g.nodes}
    seen: dict[frozenset[str], FloatUnit] = {}
    for tensor in plan.tensors:
        if g.const(tensor) is not None:
            continue
        members = {n.name for n in consumers.get(tensor, []) if n.name in plan.capable}
        producer = producers.get(tensor)
        if producer is not None and producer.name in plan.capable:
            members.add(producer.name)
        key = frozenset(members)
        if members and key not in seen:
            seen[key] = FloatUnit(tensor, key, sum(node_macs(nodes[m], g) for m in members))
    return list(seen.values())


def choose_float_fallback(graph: Graph, plan, params: dict, calibration: list[dict[str, np.ndarray]],
                          feeds: list[dict[str, np.ndarray]], target_db: float, *, method: str = "minmax",
                          weight_bits: int = 8, backend: str = "auto", skip: set[str] | None = None,
                          layers: set[str] | None = None, progress: Progress | None = None) -> FallbackResult:
    """The fewest, cheapest nodes of ``plan`` to keep float so the integer model's SQNR against
    ``graph`` (fp32) on ``feeds`` (the first :data:`EVAL_SAMPLES`) is at least ``target_db``
    (module docstring; ``target_db`` as :func:`check_min_sqnr` accepts it). ``params`` are the full
    plan's ranges from ``calibration``; a tensor that a smaller plan quantizes anew (a conv's output
    once the ReLU after it stays float) is calibrated on ``calibration`` and added to ``params`` in
    place, so the chosen plan finds its ranges there. ``skip`` and ``layers`` are the plan's own (as
    for ``quantize_graph``)."""
    feeds = feeds[:EVAL_SAMPLES]
    measure = _Measure(graph, params, calibration, feeds, method, weight_bits, backend, skip or set(), layers)
    full = measure(set())
    result = FallbackResult(target_db, full, full, samples=len(feeds), evaluations=1)
    if full >= target_db:
        return result
    units = float_units(plan)
    full_noise = _noise(full)
    gains = []
    for i, unit in enumerate(units):
        gains.append(full_noise - _noise(measure(set(unit.nodes))))
        if progress:
            progress(i + 1, len(units), f"measuring what each tensor costs ({unit.tensor})")
    from ..runtime.cost import node_macs
    total_macs = max(1, sum(node_macs(n, plan.graph) for n in plan.graph.nodes))
    floor = MIN_UNIT_COST * total_macs
    ranked = sorted(range(len(units)), key=lambda i: (gains[i] <= 0, -gains[i] / (units[i].macs + floor)))
    prefixes = [set()]
    for i in ranked:
        prefixes.append(prefixes[-1] | units[i].nodes)
    low, high = 0, len(ranked)  # prefix ``low`` is measured short of the target; ``high`` (all float) is not
    scores = {0: full}
    steps = max(1, math.ceil(math.log2(max(2, high))))
    while high - low > 1:
        mid = (low + high) // 2
        scores[mid] = measure(prefixes[mid])
        if scores[mid] >= target_db:
            high = mid
        else:
            low = mid
        if progress:
            progress(min(len(scores) - 1, steps), steps, f"searching: {mid} tensors in float, {scores[mid]:.1f} dB")
    if high not in scores:
        scores[high] = measure(prefixes[high])
    chosen = [units[i] for i in ranked[:high]]
    keep = prefixes[high]
    nodes = {n.name: n for n in plan.graph.nodes}
    result.sqnr_db = scores[high]
    result.keep_float = sorted(keep)
    result.tensors = [u.tensor for u in chosen]
    result.float_macs_share = sum(node_macs(nodes[m], plan.graph) for m in keep) / total_macs
    result.evaluations = measure.count
    return result


class _Measure:
    """SQNR of the integer model that keeps a given set of nodes float, on fixed inputs."""

    def __init__(self, graph: Graph, params: dict, calibration, feeds, method: str, weight_bits: int, backend: str,
                 skip: set[str], layers: set[str] | None) -> None:
        from ..runtime.session import Session
        self.graph, self.params, self.calibration, self.feeds = graph, params, calibration, feeds
        self.method, self.weight_bits, self.backend = method, weight_bits, backend
        self.skip, self.layers = skip, layers
        self.count = 0
        with Session(graph, backend=backend, optimize=False) as sess:
            self.reference = [sess.run(feed) for feed in feeds]
        self.outputs = list(self.reference[0])

    def __call__(self, skip: set[str]) -> float:
        from ..runtime.session import Session
        from .ptq import complete_params, integer_graph, plan_quantization
        self.count += 1
        plan = plan_quantization(self.graph, skip=skip | self.skip, layers=self.layers)
        complete_params(plan, self.params, self.calibration, self.method, self.backend)
        quantized, _ = integer_graph(plan.qdq_graph(self.params, self.weight_bits), self.method, len(self.feeds))
        with Session(quantized, backend=self.backend, optimize=False) as sess:
            approx = [sess.run(feed) for feed in self.feeds]
        return output_sqnr_db([r[o] for r in self.reference for o in self.outputs],
                              [a[o] for a in approx for o in self.outputs])


def _noise(sqnr_db: float) -> float:
    """Noise power relative to the signal's."""
    return 0.0 if math.isinf(sqnr_db) and sqnr_db > 0 else 10 ** (-sqnr_db / 10)


def _rounded(db: float) -> float | None:
    return round(db, 2) if math.isfinite(db) else None
