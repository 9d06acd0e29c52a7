"""Quantization-aware fine-tuning (QAT): train a float graph through the int8 model's own rounding,
then quantize it with the learned weights and ranges.

It is post-training quantization (``edgesdk.quant.ptq``) with a training step in the middle:

1. the same :class:`~edgesdk.quant.ptq.QuantizationPlan` (which nodes run in integer ops, which
   tensors get a QuantizeLinear/DequantizeLinear pair) and the same calibration give the starting
   (scale, zero point) of every activation;
2. the plan's float graph runs as a torch module (``edgesdk.compress.torch_bridge``) with fake
   quantization where the integer model quantizes. Those places are not re-derived here: they are
   read off the QDQ graph PTQ itself builds from the plan (a node input fed by a DequantizeLinear
   reads the quantized value; a graph output written by one is quantized) and off its fused form
   (a Conv/Gemm that became QLinearConv/QGemm adds its bias as int32). Weights are symmetric int8
   per output channel with scale max|w|/127, activations uint8 per tensor, the bias rounded at
   s_x * s_w, each exactly as the exporter will compute them, so the module's forward pass is the
   integer model up to the integer kernels' requantization rounding;
3. it trains with the fine-tuning loop of ``edgesdk.compress.finetune`` (cross-entropy mixed with
   distillation from the float graph). Rounding is a straight-through estimator: forward rounds and
   clamps, backward passes the gradient through inside the range (zero outside, where the clamp
   holds);
4. the trained weights go back into the plan's float graph and the learned scales become the
   parameters of the same QDQ rewrite and fusion as PTQ (``QuantizationPlan.qdq_graph`` ->
   ``integer_graph``), so the result is an ordinary quantized Graph: ``Session`` runs it,
   ``save_package`` writes it, ``export_onnx`` writes it as QDQ ONNX.

Activation ranges are learned, LSQ-style (Esser et al., "Learned Step Size Quantization"): each
quantized tensor's scale is a parameter trained on the task loss through the fake quantizer (the
straight-through estimator gives LSQ's gradient: round(x/s) - x/s inside the range, the clamp
level outside). Chosen over EMA-tracked min/max ranges because the loss, not the observed extremes,
then decides between clipping and resolution: a range that clips what the model needs widens, one
wasted on rare outliers narrows, and a bad calibration (too few or unrepresentative samples) is
repaired by training rather than reproduced by re-observing; and because the forward pass never
changes between training and evaluation (EMA ranges move with every training batch). The scale is
learned in the log domain (TQT-style): Adam's steps are then relative, so one learning rate fits
scales of any size without LSQ's per-tensor gradient-scale heuristic, and a scale stays positive.
The zero point stays calibration's (where zero sits in the range): at 8 bits the width is what
matters. Passthrough ops (MaxPool, Reshape, ...) share their input's scale, as PTQ gives them, so
they still run on the 8-bit tensor. Weights keep the exporter's max|w|/127 per channel (not
learned: it is what PTQ and every importer compute from the weights, and at 8 bits clipping
weights gains nothing measurable). BatchNorm is expected folded into the Conv/Gemm before (the
graph passes do that; this function runs them when a BatchNormalization is left), so there is no
batch statistics to simulate.

Needs torch (``pip install torch``, or ``pip install -e '.[train]'`` in the edgesdk source checkout).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..errors import EdgeSDKError, InputError, UnsupportedModelError
from ..graph import Graph
from .calibrate import METHODS, calibration_inputs
from .ptq import WEIGHT_QMAX, Progress, weight_qmax, QuantizationPlan, QuantizationReport, _share_passthrough_params, \
    integer_graph, plan_quantization

try:
    import torch
    from torch import nn
except ImportError:  # pragma: no cover - exercised only without the train extra
    raise EdgeSDKError("quantization-aware fine-tuning needs PyTorch: pip install torch (or, in the edgesdk "
                       "source checkout, pip install -e '.[train]')") from None

from ..compress.finetune import DEFAULT_DISTILL, DEFAULT_TEMPERATURE, _dataset_batches, _loss_fn, check_trainable, \
    module_accuracy, train as train_loop
from ..compress.torch_bridge import GraphModule, write_back
from ..datasets import Dataset
from ..ops import OPS

Log = Callable[[str], None]

# Defaults measured on the default digits model (see tests/test_qat.py): a few seconds on one core.
DEFAULT_EPOCHS = 8
DEFAULT_LR = 1e-4  # weights: small steps from the trained float model, as QAT usually takes
DEFAULT_SCALE_LR = 3e-2  # log-scales: at most ~3% of a scale per step (Adam steps are ~lr in size)
DEFAULT_BATCH = 64
CALIBRATION_SAMPLES = 256  # calibration=None: the first this many training samples


@dataclass
class QATReport:
    """What :func:`quantization_aware_finetune` did. ``quantization`` is the final integer graph's
    :class:`~edgesdk.quant.ptq.QuantizationReport`; ``start_accuracy`` / ``accuracy`` the
    fake-quantized model's top-1 on ``test`` before training (the PTQ starting point, up to the
    integer kernels' rounding) and after (None without ``test``); ``scales`` maps each quantized
    tensor (passthrough outputs share their input's) to (calibrated scale, learned scale)."""
    quantization: QuantizationReport
    epochs: int
    calibration_samples: int
    start_accuracy: float | None = None
    accuracy: float | None = None
    history: list[dict] = field(default_factory=list)
    scales: dict[str, tuple[float, float]] = field(default_factory=dict)
    seconds: float = 0.0

    def to_dict(self) -> dict:
        last = self.history[-1] if self.history else {}
        return {**self.quantization.to_dict(), "qat": {
            "epochs": self.epochs, "calibration_samples": self.calibration_samples,
            "start_accuracy": self.start_accuracy, "accuracy": self.accuracy,
            "final_loss": round(float(last["loss"]), 6) if last else None, "seconds": round(self.seconds, 3)}}


# ---------------------------------------------------------------------------------------------
# Fake quantization (straight-through estimator)
# ---------------------------------------------------------------------------------------------
def _round_ste(x: torch.Tensor) -> torch.Tensor:
    """round half to even (np.rint, as the exporter) forward; identity backward."""
    return x + (torch.round(x) - x).detach()


def fake_quantize_activation(x: torch.Tensor, scale: torch.Tensor, zero_point: float) -> torch.Tensor:
    """dequantize(quantize(x)) to uint8 at (scale, zero point), as QuantizeLinear then
    DequantizeLinear compute it; the gradient reaches x inside the range and the scale everywhere
    (LSQ's step-size gradient)."""
    q = torch.clamp(_round_ste(x / scale) + zero_point, 0.0, 255.0)
    return (q - zero_point) * scale


def fake_quantize_weight(w: torch.Tensor, axis: int, qmax: int = WEIGHT_QMAX) -> tuple[torch.Tensor, torch.Tensor]:
    """(dequantized weight, per-channel scale): symmetric int8 per ``axis`` channel with scale
    max|w|/qmax (127, or 64 for 7-bit weights; 1 for an all-zero channel), the exporter's
    ``_quantize_weight`` in float32."""
    reduce = [d for d in range(w.dim()) if d != axis]
    peak = w.detach().abs().amax(dim=reduce)
    scale = torch.where(peak > 0, peak / qmax, torch.ones_like(peak))
    shape = [1] * w.dim()
    shape[axis] = -1
    s = scale.reshape(shape)
    return torch.clamp(_round_ste(w / s), -qmax, qmax) * s, scale


def fake_quantize_bias(b: torch.Tensor, x_scale: torch.Tensor, w_scale: torch.Tensor) -> torch.Tensor:
    """The bias an integer Conv/Gemm adds: round(b / (s_x * s_w)) in int32, at that scale (the
    product in float32 and the division in float64, as the QDQ fusion computes it)."""
    step = (x_scale.detach() * w_scale).double()
    return (_round_ste(b.double() / step) * step).float()


# ---------------------------------------------------------------------------------------------
# The graph with fake quantization
# ---------------------------------------------------------------------------------------------
class FakeQuantGraphModule(GraphModule):
    """The plan's float graph as a torch module that quantizes where the integer graph does.

    ``reads`` (node index, input index) -> how that input is read: ``("act", tensor)`` the
    activation fake-quantized with ``tensor``'s learned scale, ``("weight", axis)`` per-channel
    int8, ``("const", buffer)`` a constant stored as uint8 (its fixed dequantized value), and
    ``bias`` node index -> the tensor whose scale is the integer op's input scale. ``outputs``:
    graph outputs that are dequantized values. ``keys`` maps each quantized run-time tensor to the
    tensor whose scale it uses (itself, or a passthrough op's input)."""

    def __init__(self, plan: QuantizationPlan, params: dict[str, tuple[np.float32, int]], qdq: Graph,
                 fused: Graph, weight_qmax: int = WEIGHT_QMAX) -> None:
        super().__init__(plan.graph)
        self.weight_qmax = weight_qmax
        g = plan.graph
        runtime = [t for t in plan.tensors if g.const(t) is None]
        alias = {t: t for t in runtime}
        _share_passthrough_params(g, alias)  # the rule PTQ shares parameters by
        self.keys = dict(alias)
        learned = list(dict.fromkeys(alias.values()))
        self.scale_index = {t: i for i, t in enumerate(learned)}
        self.log_scales = nn.Parameter(torch.tensor([math.log(float(params[t][0])) for t in learned],
                                                    dtype=torch.float32))
        self.zero_points = {t: float(params[t][1]) for t in learned}
        self.calibrated = {t: float(params[t][0]) for t in learned}
        self.reads: dict[tuple[int, int], tuple[str, Any]] = {}
        self.bias: dict[int, str] = {}
        producers = qdq.producers()
        twins = {n.name: n for n in qdq.nodes}
        fused_ops = {n.name: n.op for n in fused.nodes}
        for index, node in enumerate(self.nodes):
            twin = twins[node.name]
            for i, (name, now) in enumerate(zip(node.inputs, twin.inputs)):
                dq = producers.get(now) if name else None
                if dq is None or dq.op != "DequantizeLinear":
                    continue
                stored = qdq.const(dq.inputs[0])
                if stored is None:  # Q -> DQ of a run-time tensor
                    self.reads[(index, i)] = ("act", name)
                elif stored.dtype == np.int8:  # a weight, per output channel
                    self.reads[(index, i)] = ("weight", int(dq.attrs.get("axis", 1)) % stored.ndim)
                else:  # a constant operand (Add/Mul/Concat) stored as uint8: fixed, not trained
                    scale, zp = float(qdq.const(dq.inputs[1])), float(qdq.const(dq.inputs[2]))
                    value = ((stored.astype(np.float32) - np.float32(zp)) * np.float32(scale)).astype(np.float32)
                    attr = f"fq_const_{len(self.reads)}"
                    self.register_buffer(attr, torch.from_numpy(value), persistent=False)
                    self.reads[(index, i)] = ("const", attr)
            if fused_ops.get(node.name) in ("QLinearConv", "QGemm") and node.input(2) and \
                    self.reads.get((index, 0), ("",))[0] == "act" and self.reads.get((index, 1), ("",))[0] == "weight":
                self.bias[index] = self.reads[(index, 0)][1]
        self.outputs = {o: o for o in g.outputs if o in alias and producers.get(o) is not None
                        and producers[o].op == "DequantizeLinear"}

    def scale(self, tensor: str) -> torch.Tensor:
        return torch.exp(self.log_scales[self.scale_index[self.keys[tensor]]])

    def zero_point(self, tensor: str) -> float:
        return self.zero_points[self.keys[tensor]]

    def learned_params(self) -> dict[str, tuple[np.float32, int]]:
        """(scale, zero point) of every quantized run-time tensor as the module computes with them."""
        with torch.no_grad():
            return {t: (np.float32(self.scale(t).item()), int(self.zero_point(t))) for t in self.keys}

    def forward(self, *inputs: torch.Tensor):
        env = self.environment(inputs)
        quantized: dict[str, torch.Tensor] = {}

        def fake(name: str) -> torch.Tensor:
            if name not in quantized:
                quantized[name] = fake_quantize_activation(env[name], self.scale(name), self.zero_point(name))
            return quantized[name]

        for index, node in enumerate(self.nodes):
            args: list[torch.Tensor | None] = []
            w_scale = None
            for i, name in enumerate(node.inputs):
                how = self.reads.get((index, i))
                if not name:
                    args.append(None)
                elif how is None:
                    args.append(env[name])
                elif how[0] == "act":
                    args.append(fake(name))
                elif how[0] == "weight":
                    w, w_scale = fake_quantize_weight(env[name], how[1], self.weight_qmax)
                    args.append(w)
                else:
                    args.append(getattr(self, how[1]))
            if index in self.bias:
                args[2] = fake_quantize_bias(args[2], self.scale(self.bias[index]), w_scale)
            out = OPS[node.op].torch(self, node, *args)
            outs = out if isinstance(out, tuple) else (out,)
            for name, value in zip(node.outputs, outs):
                if name:
                    env[name] = value
        outs = tuple(fake(name) if name in self.outputs else env[name] for name in self.output_names)
        return outs[0] if len(outs) == 1 else outs


# ---------------------------------------------------------------------------------------------
# Prepare, train, convert
# ---------------------------------------------------------------------------------------------
class QATModel:
    """A float graph prepared for quantization-aware training: planned and calibrated as PTQ does
    (``ptq_graph`` / ``ptq_report`` are exactly what ``quantize_graph`` returns for the same
    calibration), with :attr:`module` the fake-quantized torch module; :meth:`convert` gives the
    integer graph of the module's current weights and scales."""

    def __init__(self, graph: Graph, calibration: np.ndarray, *, method: str = "minmax", skip: set[str] | None = None,
                 layers: set[str] | None = None, backend: str = "auto", progress: Progress | None = None,
                 weight_bits: int = 8) -> None:
        if method not in METHODS:
            raise InputError(f"calibration method {method!r} is not one of {', '.join(METHODS)}")
        qmax = weight_qmax(weight_bits)
        started = time.perf_counter()
        if any(n.op == "BatchNormalization" for n in graph.nodes):
            from ..passes import optimize
            graph = graph.copy()
            optimize(graph)  # folds BatchNorm into the Conv/Gemm before it
        self.method = method
        self.weight_bits = weight_bits
        self.plan = plan_quantization(graph, skip=skip, layers=layers)
        if not self.plan.capable:
            raise UnsupportedModelError(f"no op of {graph.name!r} has an integer form: nothing to quantize")
        feeds = calibration_inputs(self.plan.graph, calibration)
        self.samples = sum(len(next(iter(f.values()))) for f in feeds)
        self.params = self.plan.calibrate(feeds, method, backend, progress)
        qdq = self.plan.qdq_graph(self.params, weight_bits)
        self.ptq_graph, self.ptq_report = integer_graph(qdq.copy(), method, self.samples, started)
        self.module = FakeQuantGraphModule(self.plan, self.params, qdq, self.ptq_graph, qmax)

    def fit(self, train: Dataset, *, epochs: int = DEFAULT_EPOCHS, lr: float = DEFAULT_LR,
            batch_size: int = DEFAULT_BATCH, scale_lr: float = DEFAULT_SCALE_LR, distill: float = DEFAULT_DISTILL,
            test: Dataset | None = None, progress: Progress | None = None, log: Log | None = None,
            seed: int = 0) -> list[dict]:
        """Train :attr:`module` (weights at ``lr``, log-scales at ``scale_lr``, Adam with cosine
        decay) on ``train``; returns the per-epoch history (the arguments as for
        :func:`quantization_aware_finetune`, which checks them)."""
        module = self.module
        teacher = None
        if distill > 0:
            teacher = GraphModule(self.plan.graph).eval()  # the float model, frozen
            for p in teacher.parameters():
                p.requires_grad_(False)
        loss_fn = _loss_fn(self.plan.graph, 0.0, teacher, distill, DEFAULT_TEMPERATURE)
        weights = [p for p in module.params if p.requires_grad]
        optimizer = torch.optim.Adam([{"params": weights, "lr": lr}, {"params": [module.log_scales], "lr": scale_lr}])
        generator = torch.Generator().manual_seed(seed)
        steps = math.ceil(len(train) / batch_size)
        history = train_loop(module, optimizer, _dataset_batches(train, batch_size, generator, None), loss_fn,
                             epochs=epochs, test=test, log=log, tag="qat",
                             progress=_overall_progress(progress, epochs, steps))
        module.eval()
        return history

    def convert(self) -> tuple[Graph, QuantizationReport]:
        """The integer graph of the module's current weights and learned scales (PTQ's QDQ rewrite
        and fusion; constant operands keep their calibrated parameters)."""
        started = time.perf_counter()
        trained = QuantizationPlan(write_back(self.plan.graph.copy(), self.module), self.plan.capable,
                                   self.plan.tensors)
        params = {**self.params, **self.module.learned_params()}
        return integer_graph(trained.qdq_graph(params, self.weight_bits), f"qat+{self.method}", self.samples,
                             started)


def _check_settings(epochs: Any, lr: Any, batch_size: Any, scale_lr: Any, distill: Any) -> None:
    def positive_int(v: Any) -> bool:
        return isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v > 0

    def positive(v: Any) -> bool:
        return isinstance(v, (int, float, np.floating)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
    problems = [f"{name} must be a positive integer, got {value!r}"
                for name, value in (("epochs", epochs), ("batch_size", batch_size)) if not positive_int(value)]
    problems += [f"{name} must be a positive number, got {value!r}"
                 for name, value in (("lr", lr), ("scale_lr", scale_lr)) if not positive(value)]
    if not (isinstance(distill, (int, float)) and 0.0 <= distill <= 1.0):
        problems.append(f"distill must be in [0, 1], got {distill!r}")
    if problems:
        raise InputError("quantization-aware fine-tuning: " + "; ".join(problems))


def _overall_progress(progress: Progress | None, epochs: int, steps: int):
    """A per-epoch progress factory for the training loop that draws one bar over all the steps
    (so its ETA is the whole training's)."""
    if progress is None:
        return None
    started = [0]

    def factory(label: str):
        epoch = started[0]
        started[0] += 1
        return lambda done, total, detail: progress(epoch * steps + done, epochs * steps, f"{label} {detail}")
    return factory


def quantization_aware_finetune(graph: Graph, train: Dataset, *, calibration: np.ndarray | None = None,
                                test: Dataset | None = None, epochs: int = DEFAULT_EPOCHS, lr: float = DEFAULT_LR,
                                batch_size: int = DEFAULT_BATCH, method: str = "minmax",
                                scale_lr: float = DEFAULT_SCALE_LR, distill: float = DEFAULT_DISTILL,
                                skip: set[str] | None = None, layers: set[str] | None = None, backend: str = "auto",
                                progress: Progress | None = None, log: Log | None = None,
                                seed: int = 0, weight_bits: int = 8) -> tuple[Graph, QATReport]:
    """An int8 copy of the optimized float ``graph`` fine-tuned through its own quantization.

    ``train`` / ``test`` are :class:`~edgesdk.datasets.Dataset` s (x float32 shaped like the
    model's input, y class labels; the graph's first output scores the classes). ``calibration``
    (N input samples; default the first 256 of ``train``) gives the starting ranges by ``method``
    (minmax, percentile, mse) as :func:`~edgesdk.quant.ptq.quantize_graph` does. Training runs
    ``epochs`` epochs of Adam (cosine decay) at ``lr`` for the weights and ``scale_lr`` for the
    log activation scales, on cross-entropy mixed with ``distill`` of distillation from the float
    graph. ``skip`` and ``layers`` (mixed precision) choose the integer ops as for
    :func:`~edgesdk.quant.ptq.quantize_graph`; ``backend`` runs the calibration; ``weight_bits`` (8, or
    7 for weights in [-64, 64]) as for :func:`~edgesdk.quant.ptq.quantize_graph`.
    ``progress(done, total, detail)`` is called per calibration run (detail "calibrating") and per
    training step (one count over all epochs, detail "epoch e/E loss ..."): an
    :class:`edgesdk.progress.Progress` draws them as bars with an ETA. ``log`` gets one line per
    epoch. Deterministic for a given ``seed``.

    Returns (the integer graph, a :class:`QATReport`); the report is also in
    ``graph.metadata["quantization"]``. Bad arguments raise one-line :class:`~edgesdk.errors.InputError`
    / :class:`~edgesdk.errors.DatasetError` / :class:`~edgesdk.errors.UnsupportedModelError` before
    anything runs.
    """
    started = time.perf_counter()
    if not isinstance(train, Dataset) or (test is not None and not isinstance(test, Dataset)):
        raise InputError("quantization-aware fine-tuning: train and test must be edgesdk.datasets.Dataset "
                         "(x inputs, y labels), e.g. edgesdk.datasets.load_dataset(path)")
    _check_settings(epochs, lr, batch_size, scale_lr, distill)
    weight_qmax(weight_bits)
    if method not in METHODS:
        raise InputError(f"calibration method {method!r} is not one of {', '.join(METHODS)}")
    check_trainable(graph, train, test)
    if calibration is None:
        calibration = train.x[:CALIBRATION_SAMPLES]
    torch.manual_seed(seed)
    qat = QATModel(graph, calibration, method=method, skip=skip, layers=layers, backend=backend, progress=progress,
                   weight_bits=weight_bits)
    module = qat.module
    start_accuracy = module_accuracy(module, test) if test is not None else None
    if log is not None:
        log(f"QAT: {len(qat.plan.capable)} integer-capable ops, {len(module.scale_index)} learned activation scales, "
            f"calibrated on {qat.samples} samples ({method})"
            + (f"; fake-quantized test acc before training {start_accuracy:.4f}" if test is not None else ""))
    history = qat.fit(train, epochs=epochs, lr=lr, batch_size=batch_size, scale_lr=scale_lr, distill=distill,
                      test=test, progress=progress, log=log, seed=seed)
    qgraph, quant_report = qat.convert()
    learned = module.learned_params()
    report = QATReport(quant_report, epochs, qat.samples, start_accuracy,
                       module_accuracy(module, test) if test is not None else None, history,
                       {t: (float(module.calibrated[t]), float(learned[t][0])) for t in module.scale_index},
                       time.perf_counter() - started)
    qgraph.metadata["quantization"] = report.to_dict()
    if log is not None:
        ops = ", ".join(f"{n} {op}" for op, n in quant_report.integer_ops.items())
        log(f"QAT done in {report.seconds:.1f}s: {ops}"
            + (f"; fake-quantized test acc {report.accuracy:.4f}" if test is not None else ""))
    return qgraph, report
