"""Post-training quantization: a float graph and calibration data -> an int8 graph.

The float graph gets the QDQ form a quantizer such as ONNX Runtime's writes (weights symmetric
int8 per output channel, activations asymmetric uint8 per tensor with ranges from
``edgesdk.quant.calibrate``), and the same fusion that imports QDQ models
(``edgesdk.quant.qdq.fuse_qdq``) turns it into integer ops, so a model quantized here and one
quantized elsewhere run on the same kernels. Ops with no integer form stay float between a
DequantizeLinear and a QuantizeLinear (``Session.placements`` and ``inspect`` show them).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..errors import InputError
from ..graph import Graph, Node
from ..ops.quantize import INTEGER_PASSTHROUGH
from ..runtime.activations import ACTIVATION_PARAMS
from .calibrate import METHODS, Observer, affine_params, calibration_inputs, choose_range
from .qdq import fuse_qdq

Progress = Callable[[int, int, str], None]
WEIGHT_QMAX = 127  # symmetric int8 weights in [-127, 127]: -128 unused, as TFLite and ONNX Runtime do
WEIGHT_BITS = (8, 7)


def weight_qmax(bits: int = 8) -> int:
    """The largest weight code of ``bits``-bit symmetric weights: 127 for 8, and 64 for 7 ([-64, 64],
    ONNX Runtime's ``reduce_range``). 7-bit weights cost accuracy but every pair of them fits the
    int16 sums of ``vpmaddubsw``, so AVX2 and AVX-512 CPUs without VNNI run their layers on the
    narrow GEMM, 1.4-1.5x faster than the 16-bit one (the cpu backend checks each layer's weights,
    so results are exact either way)."""
    if bits not in WEIGHT_BITS:
        raise InputError(f"int8 weight bits must be 8 or 7 (7: [-64, 64], faster without VNNI), got {bits!r}")
    return WEIGHT_QMAX if bits == 8 else 64
_CLAMPS = ("Relu", "Clip")


@dataclass
class QuantizationReport:
    """What :func:`quantize_graph` did: the method, the integer ops, and the ops left float."""
    method: str
    samples: int
    integer_ops: dict[str, int] = field(default_factory=dict)
    float_ops: list[str] = field(default_factory=list)  # "name (op)" of the nodes left in float
    seconds: float = 0.0
    float_fallback: dict | None = None  # min_sqnr's search (FallbackResult.to_dict), when it ran

    def to_dict(self) -> dict:
        out = {"method": self.method, "samples": self.samples, "integer_ops": self.integer_ops,
               "float_ops": self.float_ops, "seconds": round(self.seconds, 3)}
        if self.float_fallback is not None:
            out["float_fallback"] = self.float_fallback
        return out


def quantize_graph(graph: Graph, calibration: np.ndarray, *, method: str = "minmax", backend: str = "auto",
                   progress: Progress | None = None, skip: set[str] | None = None,
                   layers: set[str] | None = None, weight_bits: int = 8, min_sqnr: float | None = None,
                   eval_inputs: np.ndarray | None = None) -> tuple[Graph, QuantizationReport]:
    """An int8 copy of the optimized float ``graph`` calibrated on ``calibration`` (N samples
    shaped like the model's input without the batch axis, or with it). ``method`` is one of
    ``minmax``, ``percentile``, ``mse``; ``skip`` names nodes to keep in float;
    ``progress(done, total, "calibrating")`` is called per calibration run. ``layers`` (mixed
    precision) names the Conv/Gemm/MatMul nodes to quantize: the other layers stay float, and the
    other integer-capable ops (Add, pools, activations, ...) follow their inputs, integer only when
    every run-time input comes from an integer op (:func:`follow_layers`). ``weight_bits`` 7
    quantizes weights to [-64, 64] instead of [-127, 127] (:func:`weight_qmax`). ``min_sqnr`` (dB)
    keeps in float the tensors that cost the output most until the integer model's SQNR against
    ``graph`` on ``eval_inputs`` (default: the calibration samples) reaches it
    (``edgesdk.quant.float_fallback``); the report's ``float_fallback`` says what it kept and measured."""
    from .float_fallback import check_min_sqnr, choose_float_fallback
    weight_qmax(weight_bits)
    if method not in METHODS:
        raise InputError(f"calibration method {method!r} is not one of {', '.join(METHODS)}")
    if min_sqnr is not None:
        min_sqnr = check_min_sqnr(min_sqnr)
    started = time.perf_counter()
    plan = plan_quantization(graph, skip=skip, layers=layers)
    feeds = calibration_inputs(plan.graph, calibration)
    params = plan.calibrate(feeds, method, backend, progress)
    samples = sum(len(next(iter(f.values()))) for f in feeds)
    if min_sqnr is None:
        return integer_graph(plan.qdq_graph(params, weight_bits), method, samples, started)
    checks = calibration_inputs(plan.graph, eval_inputs) if eval_inputs is not None else feeds
    fallback = choose_float_fallback(graph, plan, params, feeds, checks, min_sqnr, method=method,
                                     weight_bits=weight_bits, backend=backend, skip=skip, layers=layers,
                                     progress=progress)
    if fallback.keep_float:  # the search has put the ranges this plan adds into params
        plan = plan_quantization(graph, skip=set(skip or ()) | set(fallback.keep_float), layers=layers)
    quantized, report = integer_graph(plan.qdq_graph(params, weight_bits), method, samples, started)
    report.float_fallback = fallback.to_dict()  # not in the graph's metadata: a recipe's keep_float packs the same bytes
    return quantized, report


@dataclass
class QuantizationPlan:
    """Where a float graph is quantized: ``graph`` (a copy with fused activations split off, so a
    Relu/Clip is a node of its own), the ``capable`` nodes that become integer ops and the
    ``tensors`` that get a QuantizeLinear/DequantizeLinear pair. Post-training quantization and
    quantization-aware training (``edgesdk.quant.qat``) both start from it, so they quantize the
    same tensors in the same places."""
    graph: Graph
    capable: set[str]
    tensors: list[str]

    def calibrate(self, feeds: list[dict[str, np.ndarray]], method: str, backend: str = "auto",
                  progress: Progress | None = None) -> dict[str, tuple[np.float32, int]]:
        """(scale, zero point) of every tensor to quantize, from the float graph run on ``feeds``."""
        return _calibrate(self.graph, self.tensors, feeds, method, backend, progress)

    def qdq_graph(self, params: dict[str, tuple[np.float32, int]], weight_bits: int = 8) -> Graph:
        """A copy of the float graph in QDQ form: Q/DQ pairs with ``params`` on the tensors,
        weights symmetric int8 per output channel (``weight_bits`` 8 or 7) behind a DequantizeLinear."""
        g = self.graph.copy()
        _insert_qdq(g, self.capable, self.tensors, params, weight_qmax(weight_bits))
        g.toposort()
        return g


def plan_quantization(graph: Graph, *, skip: set[str] | None = None,
                      layers: set[str] | None = None) -> QuantizationPlan:
    """The :class:`QuantizationPlan` of the optimized float ``graph`` (``skip`` and ``layers`` as
    for :func:`quantize_graph`); ``graph`` itself is not modified."""
    from ..passes import fold_affine  # passes imports this package
    g = graph.copy()
    fold_affine(g)  # a scale and shift after a layer: one quantized tensor instead of three
    _split_fused_activations(g, skip or set())
    capable = {n.name for n in g.nodes if _integer_capable(g, n) and n.name not in (skip or set())}
    capable -= _residual_stream(g)
    if layers is not None:
        capable = follow_layers(g, capable, layers)
    return QuantizationPlan(g, capable, _tensors_to_quantize(g, capable))


def integer_graph(g: Graph, method: str, samples: int, started: float | None = None
                  ) -> tuple[Graph, QuantizationReport]:
    """A QDQ graph (:meth:`QuantizationPlan.qdq_graph`, modified in place) fused into integer ops,
    with its report (also in ``g.metadata["quantization"]``)."""
    started = time.perf_counter() if started is None else started
    fuse_qdq(g)
    from ..passes import eliminate_dead_nodes, fold_constants
    fold_constants(g)  # DQ of weights no op took (none, when every capable op fused)
    eliminate_dead_nodes(g)
    report = QuantizationReport(method, samples)
    for node in g.nodes:
        if node.op.startswith("QLinear") or node.op == "QGemm" or (
                node.op in INTEGER_PASSTHROUGH and g.tensors[node.inputs[0]].dtype != np.float32):
            report.integer_ops[node.op] = report.integer_ops.get(node.op, 0) + 1
        elif node.op not in ("QuantizeLinear", "DequantizeLinear"):
            report.float_ops.append(f"{node.name} ({node.op})")
    report.seconds = time.perf_counter() - started
    # without the time: packing is deterministic (the same model and recipe give the same bytes)
    g.metadata["quantization"] = {k: v for k, v in report.to_dict().items() if k != "seconds"}
    return g, report


# -- which ops, which tensors ---------------------------------------------------------------------
def _split_fused_activations(g: Graph, skip: set[str]) -> None:
    """Conv+Relu and the like as two nodes again: the QDQ fusion folds Relu/Clip into the
    integer op's clamp itself, and other activations become 8-bit tables of their own. An op that
    stays float keeps its activation: split off, the activation would become a table of its own
    whose input is quantized over both signs before a ReLU drops one (DenseNet-121's 58 float
    BatchNorm+ReLU: a quantization and a lookup each fewer)."""
    for node in list(g.nodes):
        if "fused_activation" not in node.attrs or not _integer_capable(g, node) or node.name in skip:
            continue
        act = node.attrs.pop("fused_activation")
        raw = g.unique_name(f"{node.outputs[0]}.pre_{act.kind.lower()}")
        out = g.tensors[node.outputs[0]]
        g.add_tensor(raw, out.shape, out.dtype)
        act_node = Node(act.kind, g.unique_name(f"{node.name}.{act.kind.lower()}"), [raw], [node.outputs[0]],
                        {"activation": act})
        node.outputs[0] = raw
        g.nodes.insert(g.nodes.index(node) + 1, act_node)


def _integer_capable(g: Graph, node: Node) -> bool:
    const = g.const
    floats = all(g.tensors[i].dtype == np.float32 for i in node.inputs[:1] if i)
    if not floats or not node.outputs or g.tensors[node.outputs[0]].dtype != np.float32:
        return False
    if node.op == "Conv":
        return const(node.inputs[1]) is not None and len(g.tensors[node.inputs[1]].shape) == 4
    if node.op == "Gemm":
        a = node.attrs
        return const(node.inputs[1]) is not None and not a["transA"] and a["alpha"] == 1.0 and (
            node.input(2) is None or (a["beta"] == 1.0 and const(node.input(2)) is not None))
    if node.op == "MatMul":
        return const(node.inputs[1]) is not None and len(g.tensors[node.inputs[1]].shape) == 2 and \
            const(node.inputs[0]) is None
    if node.op in ("Add", "Mul"):
        return not (const(node.inputs[0]) is not None and const(node.inputs[1]) is not None)
    if node.op == "GlobalAveragePool":
        return len(g.tensors[node.inputs[0]].shape) == 4
    if node.op in ("AveragePool", "Concat"):
        return True
    if node.op in INTEGER_PASSTHROUGH:
        return all(const(i) is not None for i in node.inputs[1:] if i)
    if node.op in ACTIVATION_PARAMS:
        return node.attrs["activation"].fusable
    return False


def _residual_stream(g: Graph) -> set[str]:
    """The Adds a LayerNormalization reads: a transformer's residual stream, kept in float.
    Its per-tensor 8-bit scale is set by a few outlier features while most values sit within a
    few steps of zero, and the LayerNorm then divides by their small spread, so one rounding
    there costs more than every other tensor together (timm's ViT-Tiny: 7.1 dB against fp32 with
    them in int8, 26.2 dB with them float; ONNX Runtime's quantize_static: 7.2 dB). The layers
    around them (QKV, projections, MLP) stay int8."""
    consumers = g.consumers()
    return {n.name for n in g.nodes if n.op == "Add" and
            any(u.op == "LayerNormalization" for u in consumers.get(n.outputs[0], []))}


def follow_layers(g: Graph, capable: set[str], layers: set[str]) -> set[str]:
    """The nodes of ``capable`` to quantize when only the weighted ``layers`` run in int8: those
    layers, and every other capable op whose run-time inputs all come from ops already chosen (in
    topological order), so int8 flows on through pools, adds and activations but never starts a
    chain of its own (a lone int8 Add between float convs would only add conversions)."""
    producers = g.producers()
    chosen: set[str] = set()
    for node in g.nodes:
        if node.name not in capable:
            continue
        if node.op in ("Conv", "Gemm", "MatMul"):
            if node.name in layers:
                chosen.add(node.name)
            continue
        sources = [producers.get(t) for t in _quantized_operands(g, node) if g.const(t) is None]
        if sources and all(p is not None and p.name in chosen for p in sources):
            chosen.add(node.name)
    return chosen


def _quantized_operands(g: Graph, node: Node) -> list[str]:
    """The float run-time tensors (and, for Add/Mul/Concat, constants) an integer op reads."""
    if node.op in ("Conv", "Gemm", "MatMul") or node.op in INTEGER_PASSTHROUGH or node.op in ACTIVATION_PARAMS \
            or node.op in ("GlobalAveragePool", "AveragePool"):
        return [node.inputs[0]]
    return [i for i in node.inputs if i]


def _tensors_to_quantize(g: Graph, capable: set[str]) -> list[str]:
    """Every tensor an integer op reads or writes, except an output that only feeds a Relu/Clip
    (the clamp folds into the producer, and the range after it is the one worth 8 bits)."""
    consumers = g.consumers()
    wanted: list[str] = []
    for node in g.nodes:
        if node.name not in capable:
            continue
        for name in _quantized_operands(g, node) + [node.outputs[0]]:
            if name not in wanted:
                wanted.append(name)
    skipped = set()
    for node in g.nodes:
        users = consumers.get(node.outputs[0], []) if node.outputs else []
        if node.name in capable and node.op in ("Conv", "Gemm", "MatMul", "Add", "Mul") and len(users) == 1 \
                and users[0].op in _CLAMPS and users[0].name in capable and node.outputs[0] not in g.outputs:
            skipped.add(node.outputs[0])
    return [t for t in wanted if t not in skipped]


# -- calibration ----------------------------------------------------------------------------------
def complete_params(plan: QuantizationPlan, params: dict, feeds, method: str, backend: str) -> None:
    """Add to ``params`` (a wider plan's ranges) those of the tensors that ``plan`` quantizes and
    the wider one did not: a conv's output once the ReLU after it stays float."""
    missing = [t for t in plan.tensors if t not in params]
    if missing:
        params.update(_calibrate(plan.graph, missing, feeds, method, backend, None))
        _share_passthrough_params(plan.graph, params)  # a reshape's new output takes its input's


def _calibrate(g: Graph, tensors: list[str], feeds, method: str, backend: str, progress: Progress | None
               ) -> dict[str, tuple[np.float32, int]]:
    from ..runtime.session import Session
    runtime = [t for t in tensors if g.const(t) is None]
    probe = g.copy()
    probe.outputs = list(dict.fromkeys(list(g.outputs) + runtime))
    observers = {t: Observer() for t in runtime}
    with Session(probe, backend=backend, optimize=False) as sess:
        for i, feed in enumerate(feeds):
            outs = sess.run(feed)
            for t in runtime:
                observers[t].update(outs[t])
            if progress:
                progress(i + 1, len(feeds), "calibrating")
    consumers = g.consumers()
    params = {t: affine_params(*_useful_range(g, t, consumers, *choose_range(observers[t], method)))
              for t in runtime}
    for t in tensors:
        if t not in params:  # a constant operand of Add/Mul/Concat: its own exact range
            value = g.const(t)
            params[t] = affine_params(float(value.min()), float(value.max()))
    _share_passthrough_params(g, params)
    return params


def _useful_range(g: Graph, tensor: str, consumers: dict, low: float, high: float) -> tuple[float, float]:
    """[low, high] cut to where the activations that alone read ``tensor`` still vary
    (:meth:`Activation.varying_range`): a HardSwish input below -3 or a HardSigmoid input
    beyond its ramp gives the same output saturated or not, so those codes go where they count
    (MobileNetV3's first hard-swish: a quarter of its range was below -3)."""
    users = consumers.get(tensor, [])
    if tensor in g.outputs or not users or any(u.op not in ACTIVATION_PARAMS for u in users):
        return low, high
    ranges = [u.attrs["activation"].varying_range() for u in users]
    lo, hi = min(r[0] for r in ranges), max(r[1] for r in ranges)
    if max(low, lo) >= min(high, hi):  # every value saturates alike: keep the observed range
        return low, high
    return max(low, lo), min(high, hi)


def _share_passthrough_params(g: Graph, params: dict) -> None:
    """Ops that move values keep their input's parameters on their output, so they fuse (and a
    max pool or reshape is exact)."""
    for node in g.nodes:
        if node.op in INTEGER_PASSTHROUGH and node.inputs[0] in params and node.outputs[0] in params:
            params[node.outputs[0]] = params[node.inputs[0]]


# -- rewriting ------------------------------------------------------------------------------------
def _insert_qdq(g: Graph, capable: set[str], tensors: list[str], params: dict, qmax: int = WEIGHT_QMAX) -> None:
    producers, consumers = g.producers(), g.consumers()
    for t in tensors:
        scale, zp = params[t]
        scale_name = _constant(g, f"{t}.scale", np.array(scale, np.float32))
        zp_name = _constant(g, f"{t}.zero_point", np.array(zp, np.uint8))
        shape = g.tensors[t].shape
        producer = producers.get(t)
        if g.const(t) is not None:  # a constant operand: store it quantized
            q_name = _constant(g, f"{t}.q", _quantize(g.const(t), scale, zp))
            dq_out = g.unique_name(f"{t}.dq")
            g.add_tensor(dq_out, shape, np.float32)
            g.nodes.insert(0, Node("DequantizeLinear", g.unique_name(f"{t}.dequantize"), [q_name, scale_name, zp_name],
                                   [dq_out], {"axis": 1}))
            for user in consumers.get(t, []):
                if user.name in capable:
                    user.inputs = [dq_out if i == t else i for i in user.inputs]
            continue
        q_out = g.unique_name(f"{t}.q")
        g.add_tensor(q_out, shape, np.uint8)
        if producer is None:  # a graph input: every reader takes the quantized value
            source, dq_out = t, g.unique_name(f"{t}.dq")
            g.add_tensor(dq_out, shape, np.float32)
            for user in consumers.get(t, []):
                user.inputs = [dq_out if i == t else i for i in user.inputs]
        else:  # the producer writes t.float; t itself becomes the dequantized value
            source, dq_out = g.unique_name(f"{t}.float"), t
            g.add_tensor(source, shape, np.float32)
            producer.outputs = [source if o == t else o for o in producer.outputs]
            if producer.name not in capable:  # float readers keep the exact float value
                for user in consumers.get(t, []):
                    if user.name not in capable:
                        user.inputs = [source if i == t else i for i in user.inputs]
        g.nodes.append(Node("QuantizeLinear", g.unique_name(f"{t}.quantize"), [source, scale_name, zp_name],
                            [q_out], {"axis": 1}))
        g.nodes.append(Node("DequantizeLinear", g.unique_name(f"{t}.dequantize"), [q_out, scale_name, zp_name],
                            [dq_out], {"axis": 1}))
    for node in list(g.nodes):  # _quantize_weight inserts nodes
        if node.name in capable and node.op in ("Conv", "Gemm", "MatMul"):
            _quantize_weight(g, node, qmax)


def _quantize_weight(g: Graph, node: Node, qmax: int = WEIGHT_QMAX) -> None:
    """Symmetric int8 per output channel: scale = max|w| / qmax per channel (127, or 64 for 7-bit
    weights), zero point 0."""
    name = node.inputs[1]
    w = g.const(name).astype(np.float32)
    axis = 0 if node.op == "Conv" or (node.op == "Gemm" and node.attrs["transB"]) else 1
    reduce_axes = tuple(i for i in range(w.ndim) if i != axis)
    peak = np.abs(w).max(axis=reduce_axes)
    scale = np.where(peak > 0, peak / qmax, 1.0).astype(np.float32)
    shape = [1] * w.ndim
    shape[axis] = -1
    q = np.clip(np.rint(w / scale.reshape(shape)), -qmax, qmax).astype(np.int8)
    q_name = _constant(g, f"{name}.int8", q)
    s_name = _constant(g, f"{name}.scale", scale)
    z_name = _constant(g, f"{name}.zero_point", np.zeros(scale.shape, np.int8))
    out = g.unique_name(f"{name}.dq")
    g.add_tensor(out, w.shape, np.float32)
    g.nodes.insert(0, Node("DequantizeLinear", g.unique_name(f"{name}.dequantize"), [q_name, s_name, z_name], [out],
                           {"axis": axis}))
    node.inputs[1] = out


def _quantize(value: np.ndarray, scale: np.float32, zp: int) -> np.ndarray:
    return np.clip(np.rint(value.astype(np.float32) / scale) + zp, 0, 255).astype(np.uint8)


def _constant(g: Graph, base: str, value: np.ndarray) -> str:
    name = g.unique_name(base)
    g.add_constant(name, value)
    return name
