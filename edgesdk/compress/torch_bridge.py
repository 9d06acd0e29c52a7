"""Graph <-> PyTorch: run an optimised edgesdk Graph as an ``nn.Module`` (for fine-tuning), copy the
trained weights back, and turn a user's ``nn.Module`` into a Graph.

:class:`GraphModule` executes the graph's nodes with torch ops that reproduce the numpy reference
backend (``edgesdk.backends.reference``): same canonical attributes (explicit (top, left, bottom,
right) pads, final Reshape shapes, fused activations), same pooling divisors, same LRN window. Conv
and Gemm weights and biases become ``nn.Parameter``s, every other constant a buffer; the graph's
batch size (fixed at import, usually 1) is not: Reshapes whose leading dimension is the batch follow
the batch of the actual input, so the module trains on mini-batches.

Needs torch (``pip install torch``, or ``pip install -e '.[train]'`` in the edgesdk source checkout); importing this module without it raises
:class:`~edgesdk.errors.EdgeSDKError`.
"""
from __future__ import annotations

import contextlib
import io
import logging
import math
import re
import warnings
from typing import Callable

import numpy as np

from ..errors import EdgeSDKError, UnsupportedModelError
from ..graph import Graph, Node

try:
    import torch
    import torch.nn.functional as F
    from torch import nn
except ImportError:  # pragma: no cover - exercised only without the train extra
    raise EdgeSDKError("fine-tuning needs PyTorch: pip install torch (or, in the edgesdk source checkout, pip install -e '.[train]')") from None

TRAINABLE_OPS = ("Conv", "Gemm")


def trainable_tensors(graph: Graph) -> list[str]:
    """Names of the constant weights and biases of every Conv and Gemm (each once, graph order)."""
    names: list[str] = []
    for node in graph.nodes:
        if node.op in TRAINABLE_OPS:
            for i in (1, 2):
                name = node.input(i)
                if name and graph.tensors[name].is_constant and name not in names:
                    names.append(name)
    return names


class GraphModule(nn.Module):
    """An edgesdk Graph as a torch module. ``forward`` takes the graph inputs positionally (batch
    any size) and returns the output tensor, or a tuple when the graph has several outputs.

    ``tensor_params`` maps tensor name -> ``nn.Parameter`` (Conv/Gemm weights and biases);
    :func:`write_back` copies them into a graph.
    """

    def __init__(self, graph: Graph) -> None:
        super().__init__()
        for node in graph.nodes:
            if node.op not in _OPS:
                raise UnsupportedModelError(
                    f"node {node.name!r}: op {node.op!r} has no torch implementation for fine-tuning; "
                    f"supported: {', '.join(sorted(_OPS))}")
        self.graph = graph
        self.nodes = list(graph.nodes)
        self.input_names = list(graph.inputs)
        self.output_names = list(graph.outputs)
        trainable = set(trainable_tensors(graph))
        self.params = nn.ParameterList()
        self.tensor_params: dict[str, nn.Parameter] = {}
        self._buffer_of: dict[str, str] = {}
        for tensor in graph.constants():
            value = np.asarray(tensor.data)
            if tensor.name in trainable:
                param = nn.Parameter(torch.from_numpy(np.array(value, dtype=np.float32)))
                self.params.append(param)
                self.tensor_params[tensor.name] = param
            else:
                attr = f"const_{len(self._buffer_of)}_{re.sub(r'[^0-9A-Za-z_]', '_', tensor.name)}"
                self.register_buffer(attr, torch.from_numpy(np.array(value)), persistent=True)
                self._buffer_of[tensor.name] = attr
        # Static shapes: reshapes use them to tell the batch dimension from the rest.
        self._static_shapes = {name: t.shape for name, t in graph.tensors.items()}

    def named_tensor_parameters(self) -> dict[str, nn.Parameter]:
        return dict(self.tensor_params)

    def parameter_for(self, tensor_name: str) -> nn.Parameter:
        try:
            return self.tensor_params[tensor_name]
        except KeyError:
            raise KeyError(f"{tensor_name!r} is not a trainable tensor of this graph; trainable: "
                           f"{', '.join(self.tensor_params)}") from None

    def tensor_value(self, tensor_name: str) -> torch.Tensor:
        """The value the module computes with for a trainable tensor (subclasses may derive it)."""
        return self.parameter_for(tensor_name)

    def forward(self, *inputs: torch.Tensor):
        if len(inputs) != len(self.input_names):
            raise TypeError(f"the graph takes {len(self.input_names)} inputs ({', '.join(self.input_names)}), "
                            f"got {len(inputs)}")
        env: dict[str, torch.Tensor] = dict(self.tensor_params)
        env.update((name, getattr(self, attr)) for name, attr in self._buffer_of.items())
        env.update(zip(self.input_names, inputs))
        for node in self.nodes:
            args = [env[name] if name else None for name in node.inputs]
            out = _OPS[node.op](self, node, *args)
            fused = node.attrs.get("fused_activation")
            if fused is not None:
                out = apply_activation(fused, out)
            env[node.outputs[0]] = out
        outs = tuple(env[name] for name in self.output_names)
        return outs[0] if len(outs) == 1 else outs

    # -- helpers ops need ---------------------------------------------------------------------
    def _reshape_target(self, node: Node, x: torch.Tensor) -> tuple[int, ...]:
        target = tuple(int(d) for d in node.attrs["shape"])
        static = self._static_shapes[node.inputs[0]]
        if tuple(x.shape) == static:
            return target
        # The graph was built for a fixed batch; a target whose leading dimension is that batch
        # (and that keeps the rest whole) follows the input's actual batch.
        if target and static and target[0] == static[0] and math.prod(target[1:]) == math.prod(static[1:]):
            return (x.shape[0],) + target[1:]
        raise UnsupportedModelError(
            f"node {node.name!r}: Reshape {static} -> {target} mixes the batch dimension into other axes; "
            f"it cannot run on a batch of {x.shape[0]} (fine-tune with the graph's batch size)")


# ---------------------------------------------------------------------------------------------
# Ops: (module, node, *inputs) -> output, matching backends/reference.
# ---------------------------------------------------------------------------------------------
OpFn = Callable[..., torch.Tensor]
_OPS: dict[str, OpFn] = {}


def _op(*names: str) -> Callable[[OpFn], OpFn]:
    def register(fn: OpFn) -> OpFn:
        for name in names:
            _OPS[name] = fn
        return fn
    return register


def apply_activation(act, x: torch.Tensor) -> torch.Tensor:
    """The torch twin of :meth:`edgesdk.runtime.activations.Activation.apply`."""
    kind = act.kind
    if kind == "Relu":
        return torch.relu(x)
    if kind == "Clip":
        lo, hi = act.params
        return torch.clamp(x, min=None if lo == -math.inf else lo, max=None if hi == math.inf else hi)
    if kind == "LeakyRelu":
        return torch.where(x >= 0, x, x * act.params[0])
    if kind == "Sigmoid":
        return torch.sigmoid(x)
    if kind == "Tanh":
        return torch.tanh(x)
    if kind == "HardSigmoid":
        alpha, beta = act.params
        return torch.clamp(x * alpha + beta, 0.0, 1.0)
    if kind == "HardSwish":
        return x * torch.clamp(x * (1.0 / 6.0) + 0.5, 0.0, 1.0)
    raise UnsupportedModelError(f"activation {kind!r} has no torch implementation")


@_op("Relu", "Clip", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish")
def _activation(m, node, x):
    return apply_activation(node.attrs["activation"], x)


@_op("Conv")
def _conv(m, node, x, w, b=None):
    a = node.attrs
    top, left, bottom, right = a["pads"]
    if top == bottom and left == right:
        padding = (top, left)
    else:
        x, padding = F.pad(x, (left, right, top, bottom)), (0, 0)
    return F.conv2d(x, w, b, stride=tuple(a["strides"]), padding=padding, dilation=tuple(a["dilations"]),
                    groups=a["group"])


@_op("Gemm")
def _gemm(m, node, a, b, c=None):
    attrs = node.attrs
    a = a.t() if attrs["transA"] else a
    b = b.t() if attrs["transB"] else b
    y = a @ b
    if attrs["alpha"] != 1.0:
        y = y * attrs["alpha"]
    if c is not None and attrs["beta"] != 0.0:
        y = y + (c * attrs["beta"] if attrs["beta"] != 1.0 else c)
    return y


@_op("MatMul")
def _matmul(m, node, a, b):
    return torch.matmul(a, b)


_op("Add")(lambda m, node, a, b: a + b)
_op("Sub")(lambda m, node, a, b: a - b)
_op("Mul")(lambda m, node, a, b: a * b)
_op("Div")(lambda m, node, a, b: a / b)


def _pool_geometry(node: Node, x: torch.Tensor):
    """Window, stride, dilation and the full F.pad (left, right, top, bottom) pads, ceil overhang
    included (the shared ``runtime.shapes.pool_sweep``)."""
    from ..runtime.shapes import pool_sweep
    a = node.attrs
    _, (top, left, bottom, right) = pool_sweep(node, *x.shape[2:])
    return tuple(a["kernel_shape"]), tuple(a["strides"]), tuple(a["dilations"]), (left, right, top, bottom)


@_op("MaxPool")
def _max_pool(m, node, x):
    k, s, d, full = _pool_geometry(node, x)
    xp = F.pad(x, full, value=-math.inf) if any(full) else x
    return F.max_pool2d(xp, k, s, padding=0, dilation=d)


@_op("AveragePool")
def _average_pool(m, node, x):
    (kh, kw), s, d, full = _pool_geometry(node, x)
    c = x.shape[1]
    xp = F.pad(x, full) if any(full) else x
    ones = torch.ones((c, 1, kh, kw), dtype=x.dtype, device=x.device)
    sums = F.conv2d(xp, ones, stride=s, dilation=d, groups=c)
    # Divisor: window positions on data (and on explicit pads with count_include_pad), never on
    # the ceil_mode overhang.
    h, w = x.shape[2:]
    top, left, bottom, right = node.attrs["pads"]
    counted = torch.zeros((1, 1) + tuple(xp.shape[2:]), dtype=x.dtype, device=x.device)
    if node.attrs["count_include_pad"]:
        counted[..., : top + h + bottom, : left + w + right] = 1
    else:
        counted[..., top: top + h, left: left + w] = 1
    counts = F.conv2d(counted, ones[:1], stride=s, dilation=d)
    return sums / torch.clamp(counts, min=1)


@_op("GlobalAveragePool")
def _global_average_pool(m, node, x):
    return x.mean(dim=tuple(range(2, x.dim())), keepdim=True)


@_op("GlobalMaxPool")
def _global_max_pool(m, node, x):
    return x.amax(dim=tuple(range(2, x.dim())), keepdim=True)


@_op("ReduceMean")
def _reduce_mean(m, node, x):
    return x.mean(dim=tuple(node.attrs["axes"]), keepdim=bool(node.attrs["keepdims"]))


def _per_channel(v: torch.Tensor, rank: int) -> torch.Tensor:
    return v.reshape((1, -1) + (1,) * (rank - 2))


@_op("BatchNormalization")
def _batch_norm(m, node, x, scale, bias, mean, var):
    inv_std = scale / torch.sqrt(var + node.attrs["epsilon"])
    r = x.dim()
    return (x - _per_channel(mean, r)) * _per_channel(inv_std, r) + _per_channel(bias, r)


@_op("LRN")
def _lrn(m, node, x):
    a = node.attrs
    size = a["size"]
    before, after = (size - 1) // 2, math.ceil((size - 1) / 2)
    c = x.shape[1]
    sq = torch.square(x).reshape(x.shape[0], c, -1)  # (N, C, rest)
    padded = F.pad(sq, (0, 0, before, after))
    window = sum(padded[:, i: i + c] for i in range(size)).reshape(x.shape)
    return x / (a["bias"] + (a["alpha"] / size) * window) ** a["beta"]


@_op("Softmax")
def _softmax(m, node, x):
    axis = node.attrs["axis"]
    if node.attrs["coerce_2d"]:
        flat = x.reshape(math.prod(x.shape[:axis]), -1)
        return torch.softmax(flat, dim=1).reshape(x.shape)
    return torch.softmax(x, dim=axis)


@_op("Reshape")
def _reshape(m, node, x):
    return x.reshape(m._reshape_target(node, x))


@_op("Transpose")
def _transpose(m, node, x):
    return x.permute(tuple(node.attrs["perm"]))


@_op("Concat")
def _concat(m, node, *xs):
    return torch.cat(xs, dim=node.attrs["axis"])


@_op("Pad")
def _pad(m, node, x):
    pads, mode, rank = node.attrs["pads"], node.attrs["mode"], x.dim()
    begins, ends = pads[:rank], pads[rank:]
    crop = tuple(slice(max(0, -b), x.shape[i] - max(0, -e)) for i, (b, e) in enumerate(zip(begins, ends)))
    x = x[crop]
    widths = [(max(0, b), max(0, e)) for b, e in zip(begins, ends)]
    if mode == "constant":
        flat = [p for b, e in reversed(widths) for p in (b, e)]
        return F.pad(x, flat, value=float(node.attrs["value"])) if any(flat) else x
    for axis, (b, e) in enumerate(widths):  # reflect / edge / wrap: numpy's index pattern, per axis
        if b or e:
            idx = np.pad(np.arange(x.shape[axis]), (b, e), mode=mode)
            x = x.index_select(axis, torch.from_numpy(idx).to(x.device))
    return x


# ---------------------------------------------------------------------------------------------
# Graph <-> module
# ---------------------------------------------------------------------------------------------
def write_back(graph: Graph, module: GraphModule) -> Graph:
    """Copy the module's (fine-tuned) parameters into ``graph``'s tensors as dense float32; returns
    ``graph`` (modified in place; the tensors of other copies of the graph are not touched)."""
    for name in module.tensor_params:
        if name not in graph.tensors:
            raise KeyError(f"graph {graph.name!r} has no tensor {name!r} to write back")
        tensor = graph.tensors[name]
        with torch.no_grad():
            value = module.tensor_value(name).detach().to("cpu", torch.float32).numpy().copy()
        if value.shape != tensor.shape:
            raise ValueError(f"{name!r}: parameter shape {value.shape} != tensor shape {tensor.shape}")
        tensor.data = value
        tensor.dtype = np.dtype(np.float32)
    return graph


@contextlib.contextmanager
def quiet_export():
    """Silence the exporter's warnings, prints and log records."""
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "torch.export", "torch._dynamo", "onnxscript", "torch")]
    levels = [lg.level for lg in loggers]
    buf = io.StringIO()
    try:
        for lg in loggers:
            lg.setLevel(logging.ERROR)
        with warnings.catch_warnings(), contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            warnings.simplefilter("ignore")
            yield buf
    finally:
        for lg, lv in zip(loggers, levels):
            lg.setLevel(lv)


def module_to_graph(module: nn.Module, sample_input: torch.Tensor, *, opset: int = 17) -> Graph:
    """Export ``module`` (eval mode, legacy TorchScript exporter) at ``sample_input``'s shape, import
    it and run the graph passes. The module's train/eval mode is restored afterwards."""
    import onnx

    from ..onnx_import import import_model
    from ..passes import optimize

    was_training = module.training
    module.eval()
    buf = io.BytesIO()
    try:
        with quiet_export() as log, torch.no_grad():
            try:
                torch.onnx.export(module, (sample_input,), buf, dynamo=False, opset_version=opset,
                                  input_names=["input"], output_names=["output"])
            except Exception as exc:
                raise EdgeSDKError(f"exporting the module to ONNX failed ({type(exc).__name__}: "
                                   f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''})"
                                   + (f"; exporter said: {log.getvalue().strip()[-500:]}" if log.getvalue().strip()
                                      else "")) from None
    finally:
        module.train(was_training)
    graph = import_model(onnx.load_from_string(buf.getvalue()), source=f"<{type(module).__name__}>")
    optimize(graph)
    return graph
