"""BatchNormalization (when not folded into a Conv), LayerNormalization, InstanceNormalization,
LRN, Softmax and LogSoftmax."""
from __future__ import annotations

import math

import numpy as np

from ..errors import UnsupportedModelError
from ..graph import Node
from ..runtime.sizes import check_attribute
from .geometry import normalize_axis
from .registry import BOOL, FLOAT, INT, Signature, op

batch_norm = op("BatchNormalization", family="normalization", fusable=True, fp32_only=True,
                signature=Signature(5, 0, {"epsilon": FLOAT}))
# Layer and instance norms compute their statistics in float32 on every backend and write values of
# unit scale, which half storage holds as well as any activation: not fp32_only.
layer_norm = op("LayerNormalization", family="normalization",
                signature=Signature(2, 1, {"axis": INT, "epsilon": FLOAT}),
                note="constant scale and bias; Mean and InvStdDev outputs only when unused; stash_type 1")
instance_norm = op("InstanceNormalization", family="normalization", signature=Signature(3, 0, {"epsilon": FLOAT}),
                   note="constant scale and bias")
lrn = op("LRN", family="normalization", fp32_only=True,
         signature=Signature(1, 0, {"size": INT, "alpha": FLOAT, "beta": FLOAT, "bias": FLOAT}))
# Probabilities far below half's normal range (attention scores) need float32 storage.
softmax = op("Softmax", "LogSoftmax", family="normalization", fp32_only=True,
             signature=Signature(1, 0, {"axis": INT, "coerce_2d": BOOL}))


def _same_shape(node, shapes):
    return [shapes[0]]


def per_channel(v, rank: int):
    """A (C,) vector shaped to broadcast over (N, C, ...) (numpy or torch)."""
    return v.reshape((1, -1) + (1,) * (rank - 2))


# -- BatchNormalization ---------------------------------------------------------------------------
@batch_norm.importer
def _import_batch_norm(imp, name, inputs, outputs, attrs):
    if attrs.get("training_mode", 0) or any(o for o in outputs[1:]):
        raise UnsupportedModelError(f"node {name!r}: BatchNormalization in training mode is not supported; "
                                    f"export the model in eval mode")
    if len(imp.shape(inputs[0])) < 2:
        raise UnsupportedModelError(f"node {name!r}: BatchNormalization needs an input with a channel axis")
    channels = imp.shape(inputs[0])[1]
    for i, what in zip(range(1, 5), ("scale", "bias", "mean", "variance")):
        value = imp.constant_input(name, inputs, i, f"BatchNormalization {what}")
        if value is None or value.shape != (channels,):
            got = "missing" if value is None else f"of shape {tuple(value.shape)}"
            raise UnsupportedModelError(f"node {name!r}: BatchNormalization {what} must have one value per "
                                        f"channel, shape ({channels},), got {got}; the model file is malformed")
    if (imp.graph.const(inputs[4]) + attrs.get("epsilon", 1e-5) <= 0).any():
        raise UnsupportedModelError(f"node {name!r}: BatchNormalization variance + epsilon is not positive")
    return Node("BatchNormalization", name, inputs[:5], outputs[:1],
                {"epsilon": float(attrs.get("epsilon", 1e-5))})


batch_norm.shape(_same_shape)


@batch_norm.reference
def _batch_norm_reference(node, x, scale, bias, mean, var):
    inv_std = scale / np.sqrt(var + var.dtype.type(node.attrs["epsilon"]))
    r = x.ndim
    return (x - per_channel(mean, r)) * per_channel(inv_std, r) + per_channel(bias, r)


@batch_norm.torch
def _batch_norm_torch(m, node, x, scale, bias, mean, var):
    import torch
    inv_std = scale / torch.sqrt(var + node.attrs["epsilon"])
    r = x.dim()
    return (x - per_channel(mean, r)) * per_channel(inv_std, r) + per_channel(bias, r)


# -- LRN ------------------------------------------------------------------------------------------
@lrn.importer
def _import_lrn(imp, name, inputs, outputs, attrs):
    return Node("LRN", name, inputs[:1], outputs[:1], {
        "size": int(attrs["size"]), "alpha": float(attrs.get("alpha", 1e-4)),
        "beta": float(attrs.get("beta", 0.75)), "bias": float(attrs.get("bias", 1.0))})


lrn.shape(_same_shape)


@lrn.check
def _check_lrn(node, shapes, dtype, limit):
    # Windows wider than the channels sum the same values, but size also scales alpha (alpha /
    # size), so it cannot be clipped here; the kernels clip the window, and OpenCL takes it as int.
    check_attribute(node, "size", [node.attrs["size"]], 1)


@lrn.reference
def _lrn_reference(node, x: np.ndarray) -> np.ndarray:
    a = node.attrs
    size = a["size"]
    # Channels past either end add nothing, so the window is clipped to them: padding and loop
    # stay under 2C-1 channels whatever the size (alpha is still divided by the full size).
    reach = max(x.shape[1] - 1, 0)
    before, after = min((size - 1) // 2, reach), min(size // 2, reach)
    squares = np.square(x)
    padded = np.pad(squares, [(0, 0), (before, after)] + [(0, 0)] * (x.ndim - 2))
    window = sum(padded[:, i: i + x.shape[1]] for i in range(before + after + 1))
    t = x.dtype.type
    return x / (t(a["bias"]) + t(a["alpha"] / size) * window) ** t(a["beta"])


@lrn.torch
def _lrn_torch(m, node, x):
    import torch
    import torch.nn.functional as F
    a = node.attrs
    size = a["size"]
    before, after = (size - 1) // 2, math.ceil((size - 1) / 2)
    c = x.shape[1]
    sq = torch.square(x).reshape(x.shape[0], c, -1)  # (N, C, rest)
    padded = F.pad(sq, (0, 0, before, after))
    window = sum(padded[:, i: i + c] for i in range(size)).reshape(x.shape)
    return x / (a["bias"] + (a["alpha"] / size) * window) ** a["beta"]


# -- LayerNormalization ---------------------------------------------------------------------------
def _is_read(imp, tensor: str) -> bool:
    """Whether any ONNX node reads ``tensor`` or the graph returns it."""
    returned = imp.wanted_outputs if imp.wanted_outputs is not None else [o.name for o in imp.onnx_graph.output]
    return tensor in returned or any(tensor in proto.input for proto in imp.onnx_graph.node)


def _affine_constant(imp, name: str, inputs: list[str], index: int, what: str, normalized: tuple[int, ...]
                     ) -> str | None:
    """The constant scale or bias input, as a tensor of the normalised shape exactly (ONNX lets
    it broadcast there; kernels read one value per normalised element)."""
    value = imp.constant_input(name, inputs, index, f"LayerNormalization {what}")
    if value is None:
        return None
    if value.dtype != np.float32 or value.ndim > len(normalized) or \
            any(d not in (1, n) for d, n in zip(value.shape[::-1], normalized[::-1])):
        raise UnsupportedModelError(
            f"node {name!r}: LayerNormalization {what} of shape {list(value.shape)} ({value.dtype}) does not "
            f"broadcast to the normalised shape {list(normalized)}")
    if value.shape == normalized:
        return inputs[index]
    full = imp.graph.unique_name(f"{name}.{what}")
    imp.graph.add_constant(full, np.ascontiguousarray(np.broadcast_to(value, normalized)))
    return full


@layer_norm.importer
def _import_layer_norm(imp, name, inputs, outputs, attrs):
    if int(attrs.get("stash_type", 1)) != 1:
        raise UnsupportedModelError(f"node {name!r}: LayerNormalization stash_type {attrs['stash_type']} is not "
                                    f"supported (statistics are computed in float32: stash_type 1)")
    used = [o for o in outputs[1:3] if o and _is_read(imp, o)]
    if used:
        raise UnsupportedModelError(f"node {name!r}: LayerNormalization's Mean and InvStdDev outputs are not "
                                    f"supported (read: {', '.join(map(repr, used))}); only Y is computed")
    shape = imp.shape(inputs[0])
    axis = normalize_axis(int(attrs.get("axis", -1)), len(shape), "LayerNormalization axis")
    normalized = shape[axis:]
    scale = _affine_constant(imp, name, inputs, 1, "scale", normalized)
    bias = _affine_constant(imp, name, inputs, 2, "bias", normalized)
    return Node("LayerNormalization", name, [inputs[0], scale] + ([bias] if bias else []), outputs[:1],
                {"axis": axis, "epsilon": float(attrs.get("epsilon", 1e-5))})


@layer_norm.shape
def _layer_norm_shape(node, shapes):
    x, axis = shapes[0], node.attrs["axis"]
    if not 0 <= axis < max(len(x), 1):
        raise UnsupportedModelError(f"node {node.name!r}: LayerNormalization axis {axis} is out of range for "
                                    f"rank {len(x)}")
    for what, name, shape in zip(("scale", "bias"), node.inputs[1:], shapes[1:]):
        if name and tuple(shape) != tuple(x[axis:]):
            raise UnsupportedModelError(f"node {node.name!r}: LayerNormalization {what} has shape {list(shape)}, "
                                        f"expected the normalised shape {list(x[axis:])}")
    return [x]


@layer_norm.reference
def _layer_norm_reference(node, x: np.ndarray, scale: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    axes = tuple(range(node.attrs["axis"], x.ndim))
    y = normalized(x, axes, node.attrs["epsilon"]) * scale
    return y if bias is None else y + bias


def normalized(x: np.ndarray, axes: tuple[int, ...], epsilon: float) -> np.ndarray:
    """(x - mean) / sqrt(variance + epsilon) over ``axes``, in float32 (ONNX's stash_type 1)."""
    x32 = x.astype(np.float32, copy=False)
    centred = x32 - x32.mean(axis=axes, keepdims=True)
    variance = np.square(centred).mean(axis=axes, keepdims=True)
    return (centred / np.sqrt(variance + np.float32(epsilon))).astype(x.dtype, copy=False)


@layer_norm.macs
def _norm_macs(node, graph) -> int:
    # Per element: one squared deviation accumulated, one scale multiply-add.
    return 2 * math.prod(graph.tensors[node.inputs[0]].shape)


@layer_norm.torch
def _layer_norm_torch(m, node, x, scale, bias=None):
    import torch.nn.functional as F
    return F.layer_norm(x, tuple(x.shape[node.attrs["axis"]:]), scale, bias, node.attrs["epsilon"])


# -- InstanceNormalization ------------------------------------------------------------------------
@instance_norm.importer
def _import_instance_norm(imp, name, inputs, outputs, attrs):
    shape = imp.shape(inputs[0])
    if len(shape) < 3:
        raise UnsupportedModelError(f"node {name!r}: InstanceNormalization needs an (N, C, spatial...) input, "
                                    f"got shape {list(shape)}")
    for index, what in ((1, "scale"), (2, "bias")):
        value = imp.constant_input(name, inputs, index, f"InstanceNormalization {what}")
        if value is None or value.shape != (shape[1],) or value.dtype != np.float32:
            got = "missing" if value is None else f"of shape {list(value.shape)} ({value.dtype})"
            raise UnsupportedModelError(f"node {name!r}: InstanceNormalization {what} must hold one float per "
                                        f"channel, shape [{shape[1]}], got {got}")
    return Node("InstanceNormalization", name, inputs[:3], outputs[:1], {"epsilon": float(attrs.get("epsilon", 1e-5))})


@instance_norm.shape
def _instance_norm_shape(node, shapes):
    x = shapes[0]
    if len(x) < 3 or any(tuple(s) != (x[1],) for s in shapes[1:3]):
        raise UnsupportedModelError(f"node {node.name!r}: InstanceNormalization needs an (N, C, spatial...) input "
                                    f"and scale and bias of shape [C]; got {' and '.join(map(str, shapes))}")
    return [x]


@instance_norm.reference
def _instance_norm_reference(node, x: np.ndarray, scale: np.ndarray, bias: np.ndarray) -> np.ndarray:
    r = x.ndim
    y = normalized(x, tuple(range(2, r)), node.attrs["epsilon"])
    return y * per_channel(scale, r) + per_channel(bias, r)


instance_norm.macs(_norm_macs)


@instance_norm.torch
def _instance_norm_torch(m, node, x, scale, bias):
    dims = tuple(range(2, x.dim()))
    centred = x - x.mean(dim=dims, keepdim=True)
    variance = centred.square().mean(dim=dims, keepdim=True)
    r = x.dim()
    return centred / (variance + node.attrs["epsilon"]).sqrt() * per_channel(scale, r) + per_channel(bias, r)


# -- Softmax and LogSoftmax -----------------------------------------------------------------------
@softmax.importer
def _import_softmax(imp, name, inputs, outputs, attrs):
    rank = len(imp.shape(inputs[0]))
    default = -1 if imp.opset >= 13 else 1
    axis = normalize_axis(int(attrs.get("axis", default)), rank, f"{imp.op_type} axis")
    # Before opset 13 the input is coerced to 2-D at `axis` (one softmax over all axes from
    # `axis` on); from the last axis that is the same as one axis.
    coerce = imp.opset < 13 and axis < rank - 1
    return Node(imp.op_type, name, inputs[:1], outputs[:1], {"axis": axis, "coerce_2d": coerce})


@softmax.shape
def _softmax_shape(node, shapes):
    rank, axis = len(shapes[0]), node.attrs["axis"]
    if not 0 <= axis < max(rank, 1):
        raise UnsupportedModelError(f"node {node.name!r}: {node.op} axis {axis} is out of range for rank {rank}")
    return [shapes[0]]


def softmax_view(node: Node, shape: tuple[int, ...]) -> tuple[int, int, int]:
    """(outer, axis, inner): the input seen as 3-D with the softmax along the middle axis."""
    axis = node.attrs["axis"]
    outer = math.prod(shape[:axis])
    if node.attrs["coerce_2d"]:
        return outer, math.prod(shape[axis:]), 1
    return outer, shape[axis] if shape else 1, math.prod(shape[axis + 1:])


@softmax.reference
def _softmax_reference(node, x: np.ndarray) -> np.ndarray:
    view = x.reshape(softmax_view(node, x.shape))
    # Max-subtracted: exp never overflows; a row with NaN or +inf, or all -inf, gives NaN.
    shifted = view - view.max(axis=1, keepdims=True)
    if node.op == "LogSoftmax":
        out = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    else:
        e = np.exp(shifted)
        out = e / e.sum(axis=1, keepdims=True)
    return out.reshape(x.shape)


@softmax.torch
def _softmax_torch(m, node, x):
    import torch
    view = x.reshape(softmax_view(node, tuple(x.shape)))
    fn = torch.log_softmax if node.op == "LogSoftmax" else torch.softmax
    return fn(view, dim=1).reshape(x.shape)


# -- the unfused LayerNorm of older exporters -----------------------------------------------------
# torch's legacy exporter (opset < 17) and TF exporters write LayerNorm as its arithmetic:
#   mean = ReduceMean(x, trailing axes); d = Sub(x, mean); var = ReduceMean(Pow(d, 2) | Mul(d, d))
#   std = Sqrt(Add(var, eps)); n = Div(d, std) | Mul(d, Reciprocal(std))
#   [Mul(n, gamma)] [Add(., beta)]
# edgesdk.passes.fuse_layer_norm turns it into one LayerNormalization node with what follows.
class _Chain:
    """Walks a candidate subgraph one node at a time, collecting the nodes it passes."""

    def __init__(self, graph, consumers: dict[str, list[Node]]) -> None:
        self.graph, self.consumers = graph, consumers
        self.nodes: list[Node] = []

    def take(self, node: Node) -> Node:
        self.nodes.append(node)
        return node

    def only_reader(self, tensor: str, *ops: str) -> Node | None:
        """The one node reading ``tensor`` when it is internal and that node is one of ``ops``
        (without a fused activation, which LayerNormalization cannot carry)."""
        readers = {id(n): n for n in self.consumers.get(tensor, ())}
        if tensor in self.graph.outputs or len(readers) != 1:
            return None
        node = next(iter(readers.values()))
        return node if node.op in ops and "fused_activation" not in node.attrs else None

    def constant_operand(self, node: Node, tensor: str) -> np.ndarray | None:
        """The other input of binary ``node`` (one of whose inputs is ``tensor``), if constant."""
        others = [i for i in node.inputs if i != tensor]
        value = self.graph.const(others[0]) if len(others) == 1 and len(node.inputs) == 2 else None
        return value if value is not None and value.dtype == np.float32 else None


# A mean over the spatial axes of (N, C, H, W) imports as GlobalAveragePool.
MEAN_OPS = ("ReduceMean", "GlobalAveragePool")


def _trailing_mean_axis(node: Node, rank: int) -> int | None:
    """The first axis of a keepdims mean over the trailing axes (axis..last), else None."""
    if node.op == "GlobalAveragePool":
        return 2 if rank >= 3 else None
    axes = tuple(node.attrs["axes"])
    if node.op != "ReduceMean" or not node.attrs["keepdims"] or not axes or axes != tuple(range(axes[0], rank)):
        return None
    return axes[0]


def _is_scalar(value: np.ndarray | None, equal_to: float | None = None) -> bool:
    return value is not None and value.size == 1 and (equal_to is None or float(value.reshape(-1)[0]) == equal_to)


def _per_element(value: np.ndarray, shape: tuple[int, ...], axis: int) -> np.ndarray | None:
    """``value`` as one number per normalised element when it broadcasts over shape[axis:] only."""
    if value.ndim > len(shape):
        return None
    padded = value.reshape((1,) * (len(shape) - value.ndim) + value.shape)
    if any(d != 1 for d in padded.shape[:axis]) or any(d not in (1, s) for d, s in zip(padded.shape, shape)):
        return None
    return np.ascontiguousarray(np.broadcast_to(padded.reshape(padded.shape[axis:]), shape[axis:]))


def _normalizing_step(chain: _Chain, d: str, std: str) -> Node | None:
    """Div(d, std), or Mul(d, Reciprocal(std)): the node dividing the deviations."""
    step = chain.only_reader(std, "Div", "Reciprocal")
    if step is not None and step.op == "Div":
        return chain.take(step) if step.inputs == [d, std] else None
    if step is None:
        return None
    chain.take(step)
    product = chain.only_reader(step.outputs[0], "Mul")
    return chain.take(product) if product is not None and sorted(product.inputs) == sorted([d, step.outputs[0]]) \
        else None


def _variance_chain(chain: _Chain, d: str, axis: int, rank: int) -> tuple[float, str] | None:
    """From the deviations d to the standard deviation: (epsilon, the Sqrt's output)."""
    readers = {id(n): n for n in chain.consumers.get(d, ())}
    squares = [n for n in readers.values() if (n.op == "Mul" and n.inputs == [d, d]) or (
        n.op == "Pow" and n.inputs[0] == d and _is_scalar(chain.constant_operand(n, d), 2.0))]
    if d in chain.graph.outputs or len(readers) != 2 or len(squares) != 1:
        return None
    variance = chain.only_reader(chain.take(squares[0]).outputs[0], *MEAN_OPS)
    if variance is None or _trailing_mean_axis(variance, rank) != axis:
        return None
    add = chain.only_reader(chain.take(variance).outputs[0], "Add")
    eps = chain.constant_operand(add, variance.outputs[0]) if add is not None else None
    if not _is_scalar(eps) or eps.ndim > rank:
        return None
    sqrt = chain.only_reader(chain.take(add).outputs[0], "Sqrt")
    return (float(eps.reshape(-1)[0]), chain.take(sqrt).outputs[0]) if sqrt is not None else None


def _affine_tail(chain: _Chain, out: str, shape: tuple[int, ...], axis: int, op: str
                 ) -> tuple[np.ndarray, str] | None:
    """A following Mul(gamma) or Add(beta) by a constant over the normalised axes: (the constant
    per normalised element, the node's output)."""
    node = chain.only_reader(out, op)
    value = chain.constant_operand(node, out) if node is not None else None
    per_element = _per_element(value, shape, axis) if value is not None else None
    if per_element is None:
        return None
    return per_element, chain.take(node).outputs[0]


def match_unfused_layer_norm(graph, mean: Node, consumers: dict[str, list[Node]]
                             ) -> tuple[list[Node], Node] | None:
    """When ``mean`` starts an unfused LayerNorm (see above): the nodes it spans and the
    LayerNormalization node computing the same output; else None. Every intermediate tensor
    must be read inside the subgraph only, eps, gamma and beta constants."""
    if mean.op not in MEAN_OPS:
        return None
    x = mean.inputs[0]
    shape = graph.tensors[x].shape
    axis = _trailing_mean_axis(mean, len(shape))
    chain = _Chain(graph, consumers)
    sub = chain.only_reader(chain.take(mean).outputs[0], "Sub") if axis is not None else None
    if sub is None or sub.inputs != [x, mean.outputs[0]]:
        return None
    d = chain.take(sub).outputs[0]
    variance = _variance_chain(chain, d, axis, len(shape))
    divide = _normalizing_step(chain, d, variance[1]) if variance is not None else None
    if divide is None:
        return None
    out = divide.outputs[0]
    scale_tail = _affine_tail(chain, out, shape, axis, "Mul")
    scale, out = scale_tail if scale_tail is not None else (np.ones(shape[axis:], np.float32), out)
    bias_tail = _affine_tail(chain, out, shape, axis, "Add")
    bias, out = bias_tail if bias_tail is not None else (None, out)
    if graph.tensors[out].shape != shape:
        return None
    name = f"{mean.name.rsplit('/', 1)[0]}/LayerNormalization" if "/" in mean.name else f"{mean.name}.layer_norm"
    name = graph.unique_name(name)
    inputs = [x, graph.add_constant(graph.unique_name(f"{name}.scale"), scale).name]
    if bias is not None:
        inputs.append(graph.add_constant(graph.unique_name(f"{name}.bias"), bias).name)
    return chain.nodes, Node("LayerNormalization", name, inputs, [out], {"axis": axis, "epsilon": variance[0]})
