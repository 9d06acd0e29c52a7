"""Graph passes: constant folding, view cleanup, BatchNorm folding, activation fusion, dead code.

Each pass rewrites the graph in place and returns how many rewrites it made. ``optimize`` runs
them in the order that lets each feed the next (BN must fold before its conv takes a ReLU).
"""
from __future__ import annotations

import math

import numpy as np

from .graph import Graph, Node
from .ops import OPS, evaluate
from .runtime.activations import ACTIVATION_PARAMS, Activation
from .quant.qdq import fuse_qdq, int8_activations_to_uint8
from .runtime.shapes import check_folding

# Ops whose kernels apply a fused activation to their output in every backend (``OpSpec.fusable``).
FUSABLE_PRODUCERS = frozenset(name for name, spec in OPS.items() if spec.fusable)


def optimize(graph: Graph) -> dict[str, int]:
    """Run every pass; returns rewrites per pass (for ``inspect`` and logs)."""
    stats = {
        # First: the folding below would turn the integer weights the fusion takes into floats.
        "fuse_qdq": fuse_qdq(graph),
        "int8_activations_to_uint8": int8_activations_to_uint8(graph),
        "fold_constants": fold_constants(graph),
        "remove_noop_views": remove_noop_views(graph),
        "fuse_layer_norm": fuse_layer_norm(graph),  # before fuse_activations takes its Sqrt
        "fold_batchnorm": fold_batchnorm(graph),
        "fuse_gated_activations": fuse_gated_activations(graph),
        "fuse_gelu": fuse_gelu(graph),
        "fuse_gelu_tanh": fuse_gelu_tanh(graph),
        "fuse_mish": fuse_mish(graph),
        "fuse_hard_activations": fuse_hard_activations(graph),
        "fuse_activations": fuse_activations(graph),  # after the patterns above: Conv -> Gelu fuses
    }
    stats["eliminate_dead_nodes"] = eliminate_dead_nodes(graph)
    return stats


def fold_constants(graph: Graph) -> int:
    """Evaluate every node whose inputs are all constant and keep its outputs as constants."""
    folded = 0
    remaining: list[Node] = []
    for node in graph.nodes:
        # check before reading values: graph.const decodes a compressed weight, and a Conv with
        # a clustered weight must keep it compressed for the backends that run it that way
        if not all(name in graph.tensors and graph.tensors[name].is_constant for name in node.inputs if name):
            remaining.append(node)
            continue
        values = [graph.const(i) for i in node.inputs]
        check_folding(node, values)  # from shapes, before evaluating allocates the result
        for name, value in zip(node.outputs, evaluate(node, values)):
            if name:
                graph.add_constant(name, np.asarray(value))
        folded += 1
    graph.nodes = remaining
    return folded


def _single_internal_use(graph: Graph, tensor: str, consumers: dict[str, list[Node]]) -> bool:
    return tensor not in graph.outputs and len(consumers.get(tensor, ())) == 1


def _bypass(graph: Graph, node: Node, consumers: dict[str, list[Node]], producers: dict[str, Node]) -> bool:
    """Remove a node whose output equals its input. False when the graph's interface forbids it."""
    src, dst = node.inputs[0], node.outputs[0]
    if dst not in graph.outputs:
        for user in consumers.get(dst, ()):
            user.inputs = [src if i == dst else i for i in user.inputs]
    elif src in producers and src not in graph.outputs:
        # The output name is part of the interface: the producer of src writes it instead.
        producer = producers[src]
        producer.outputs = [dst if o == src else o for o in producer.outputs]
        del graph.tensors[src]
        for user in consumers.get(src, ()):
            user.inputs = [dst if i == src else i for i in user.inputs]
    else:
        return False
    graph.nodes.remove(node)
    return True


def remove_noop_views(graph: Graph) -> int:
    """Drop reshapes to the same shape (Identity, Dropout) and merge chains of reshapes."""
    rewrites = 0
    for node in list(graph.nodes):
        if node.op != "Reshape":
            continue
        consumers, producers = graph.consumers(), graph.producers()
        src = node.inputs[0]
        upstream = producers.get(src)
        if upstream is not None and upstream.op == "Reshape" and _single_internal_use(graph, src, consumers):
            node.inputs = [upstream.inputs[0]]  # reshape(reshape(x)) == reshape(x)
            graph.nodes.remove(upstream)
            rewrites += 1
            src = node.inputs[0]
        if graph.tensors[src].shape == tuple(node.attrs["shape"]):
            rewrites += _bypass(graph, node, graph.consumers(), graph.producers())
    graph.remove_unused_tensors()
    return rewrites


def fold_batchnorm(graph: Graph) -> int:
    """Fold BatchNormalization into the Conv, ConvTranspose or Gemm that feeds it (weights and bias)."""
    folded = 0
    for bn in [n for n in graph.nodes if n.op == "BatchNormalization"]:
        producer = _foldable_layer(graph, bn.inputs[0], ("Conv", "ConvTranspose", "Gemm"))
        if producer is None:
            continue
        gamma, beta, mean, var = (graph.const(i) for i in bn.inputs[1:5])
        scale = (gamma / np.sqrt(var + np.float32(bn.attrs["epsilon"]))).astype(np.float32)
        _scale_and_shift(graph, producer, scale, beta - mean * scale, "bn")
        _absorb(graph, producer, bn)
        folded += 1
    graph.remove_unused_tensors()
    return folded


_AFFINE_OPS = ("Mul", "Div", "Add", "Sub")


def fold_affine(graph: Graph) -> int:
    """Fold a Mul, Div, Add or Sub by a constant that is one value per output channel (or one
    value) into the Conv, ConvTranspose or Gemm that feeds it, as BatchNorm folds: PP-LCNet's
    learnable scale and bias after every convolution (PP-OCRv4) become part of it, and an int8
    model quantizes one tensor where it quantized three (each an added rounding).

    Post-training quantization runs it (``quant.ptq.plan_quantization``); ``optimize`` does not:
    in an fp16 session the scalars it folds would be rounded to half inside the weights and
    biases, where ``runtime.precision.round_constant`` keeps them in fp32 (PP-OCRv4 rec's fp16
    error moved by up to 2.7x on single inputs either way, 0.9e-2 -> 1.2e-2 on average)."""
    folded = 0
    for node in [n for n in graph.nodes if n.op in _AFFINE_OPS]:
        consts = [graph.const(i) for i in node.inputs[:2]]
        if (consts[0] is None) == (consts[1] is None):
            continue
        side = 0 if consts[0] is None else 1  # the run-time operand
        if node.op in ("Div", "Sub") and side != 0:  # c / x and c - x are not affine in x
            continue
        layer = _foldable_layer(graph, node.inputs[side], ("Conv", "ConvTranspose", "Gemm"))
        per_channel = _per_channel(graph, node, consts[1 - side]) if layer is not None else None
        if per_channel is None:
            continue
        ones, zeros = np.ones_like(per_channel), np.zeros_like(per_channel)
        scale, shift = {"Mul": (per_channel, zeros), "Div": (np.float32(1) / per_channel, zeros),
                        "Add": (ones, per_channel), "Sub": (ones, -per_channel)}[node.op]
        _scale_and_shift(graph, layer, scale.astype(np.float32), shift.astype(np.float32), "affine")
        if "fused_activation" in node.attrs:  # the layer (none of its own) applies it after the affine
            layer.attrs["fused_activation"] = node.attrs["fused_activation"]
        _absorb(graph, layer, node)
        folded += 1
    graph.remove_unused_tensors()
    return folded


def _foldable_layer(graph: Graph, tensor: str, ops: tuple[str, ...]) -> Node | None:
    """The layer producing ``tensor`` when a per-channel scale and shift of its output can move
    into its weights and bias: one of ``ops``, no fused activation, ``tensor`` read by one node
    only, ConvTranspose ungrouped, weights and bias dense constants."""
    producer = graph.producers().get(tensor)
    if (producer is None or producer.op not in ops or "fused_activation" in producer.attrs
            or not _single_internal_use(graph, tensor, graph.consumers())
            or (producer.op == "ConvTranspose" and producer.attrs.get("group", 1) != 1)):
        return None
    # Only dense constants: a compressed weight (a package's codebook) stays as stored.
    params = [producer.inputs[1]] + ([producer.input(2)] if producer.input(2) else [])
    if not all(graph.tensors[p].is_constant and graph.tensors[p].encoding is None for p in params):
        return None
    return producer


def _per_channel(graph: Graph, node: Node, value: np.ndarray) -> np.ndarray | None:
    """``value`` (the constant operand of ``node``) as one finite float per channel of the
    layer's output (axis 1), when broadcasting it changes nothing but that axis; else None."""
    out_shape = graph.tensors[node.outputs[0]].shape
    if value.dtype != np.float32 or value.ndim > len(out_shape) or not np.all(np.isfinite(value)):
        return None
    full = value.reshape((1,) * (len(out_shape) - value.ndim) + value.shape)
    if any(d != 1 for i, d in enumerate(full.shape) if i != 1) or full.shape[1] not in (1, out_shape[1]):
        return None
    if node.op == "Div" and not np.all(full):
        return None
    return np.broadcast_to(full.reshape(-1), (out_shape[1],)).astype(np.float32)


def _scale_and_shift(graph: Graph, layer: Node, scale: np.ndarray, shift: np.ndarray, tag: str) -> None:
    """Rewrite ``layer`` (Conv, ConvTranspose or Gemm) so that it computes its output times
    ``scale`` plus ``shift``, both per output channel."""
    weights = graph.const(layer.inputs[1])
    bias = graph.const(layer.input(2)) if layer.input(2) else None
    if layer.op == "Conv":
        new_w = weights * scale.reshape(-1, 1, 1, 1)
        new_b = (0 if bias is None else bias) * scale + shift
    elif layer.op == "ConvTranspose":  # weights (C_in, C_out, kh, kw)
        new_w = weights * scale.reshape(1, -1, 1, 1)
        new_b = (0 if bias is None else bias) * scale + shift
    else:
        new_w = weights * (scale[:, None] if layer.attrs["transB"] else scale[None, :])
        c = 0 if bias is None else bias * np.float32(layer.attrs["beta"])
        new_b = np.broadcast_to(c * scale + shift, np.broadcast_shapes(np.shape(c), scale.shape))
        layer.attrs["beta"] = 1.0
    w_name = graph.unique_name(f"{layer.name}.weight_{tag}")
    graph.add_constant(w_name, new_w.astype(np.float32))
    b_name = graph.unique_name(f"{layer.name}.bias_{tag}")
    graph.add_constant(b_name, np.ascontiguousarray(new_b, dtype=np.float32))
    layer.inputs = [layer.inputs[0], w_name, b_name]


def fuse_layer_norm(graph: Graph) -> int:
    """Replace the LayerNorm arithmetic of torch's legacy (opset < 17) and TF exporters with one
    LayerNormalization node (``ops.normalization.match_unfused_layer_norm`` says what matches)."""
    from .ops.normalization import match_unfused_layer_norm
    fused, consumers = 0, graph.consumers()
    for node in list(graph.nodes):
        match = match_unfused_layer_norm(graph, node, consumers)
        if match is None:
            continue
        spanned, layer_norm = match
        gone = {id(n) for n in spanned}
        last = max(i for i, n in enumerate(graph.nodes) if id(n) in gone)  # after every input it reads
        graph.nodes[last] = layer_norm
        graph.nodes = [n for n in graph.nodes if id(n) not in gone]
        consumers = graph.consumers()
        fused += 1
    graph.remove_unused_tensors()
    return fused


# -- activation patterns exporters emit (x * Sigmoid(x), the GELU formulas, Mish) ---------------
def fuse_gated_activations(graph: Graph) -> int:
    """x * Sigmoid(x) -> Swish (SiLU, torch's nn.SiLU and x * torch.sigmoid(x)); x * HardSigmoid(x)
    with alpha 1/6, beta 0.5 (tf2onnx's hard-swish) -> HardSwish."""
    rw = _ChainRewriter(graph)
    for gate in rw.candidates("Sigmoid", "HardSigmoid"):
        x, gated = gate.inputs[0], _gated_activation(gate.attrs["activation"])
        multiply = rw.sole_consumer(gate.outputs[0])
        if gated is not None and _is_product(multiply, x, gate.outputs[0]):
            rw.replace([gate, multiply], x, gated)
    return rw.finish()


def fuse_gelu(graph: Graph) -> int:
    """GELU as torch's legacy exporter and TF write it, 0.5 * x * (1 + Erf(x / sqrt(2))) (x / sqrt 2
    also as x * 0.7071, the three products in any grouping and operand order) -> Gelu."""
    rw = _ChainRewriter(graph)
    for erf in rw.candidates("Erf"):
        scale = rw.producer(erf.inputs[0])
        x = _scaled_operand(graph, scale, 1.0 / math.sqrt(2.0))
        plus_one = rw.sole_consumer(erf.outputs[0])
        if x is None or _scaled_operand(graph, plus_one, 1.0, shift=True) != erf.outputs[0]:
            continue
        tail = _half_x_times(rw, x, plus_one.outputs[0])
        if tail is not None:
            rw.replace([scale, erf, plus_one, *tail], x, Activation("Gelu", (0.0,)))
    return rw.finish()


def fuse_gelu_tanh(graph: Graph) -> int:
    """The tanh GELU, 0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3))) with x^3 as Pow(x, 3)
    or two products (torch's nn.GELU(approximate="tanh"), HF's NewGELU) -> Gelu(tanh)."""
    rw = _ChainRewriter(graph)
    for tanh in rw.candidates("Tanh"):
        scale = rw.producer(tanh.inputs[0])
        cubic = _x_plus_cubic(rw, rw.producer(_scaled_operand(graph, scale, math.sqrt(2.0 / math.pi))))
        plus_one = rw.sole_consumer(tanh.outputs[0])
        if cubic is None or _scaled_operand(graph, plus_one, 1.0, shift=True) != tanh.outputs[0]:
            continue
        x, cubic_nodes = cubic
        tail = _half_x_times(rw, x, plus_one.outputs[0])
        if tail is not None:
            rw.replace([*cubic_nodes, scale, tanh, plus_one, *tail], x, Activation("Gelu", (1.0,)))
    return rw.finish()


def fuse_mish(graph: Graph) -> int:
    """x * Tanh(Softplus(x)) (torch's nn.Mish before opset 18) -> Mish."""
    rw = _ChainRewriter(graph)
    for softplus in rw.candidates("Softplus"):
        x, tanh = softplus.inputs[0], rw.sole_consumer(softplus.outputs[0])
        multiply = rw.sole_consumer(tanh.outputs[0]) if tanh is not None and tanh.op == "Tanh" else None
        if _is_product(multiply, x, tanh.outputs[0] if tanh is not None else ""):
            rw.replace([softplus, tanh, multiply], x, Activation("Mish"))
    return rw.finish()


def fuse_hard_activations(graph: Graph) -> int:
    """The hard-swish and hard-sigmoid formulas Paddle, Keras and older exporters write:
    Clip(x + 3, 0, 6) / 6 (or * 1/6) -> HardSigmoid(1/6, 0.5), and x * Clip(x + 3, 0, 6) / 6 in any
    grouping ((x * r) / 6 or x * (r / 6)) -> HardSwish. One table lookup in int8, one kernel in float."""
    rw = _ChainRewriter(graph)
    for clip in rw.candidates("Clip"):
        if tuple(clip.attrs["activation"].params) != (0.0, 6.0):
            continue
        shift = rw.producer(clip.inputs[0])
        x = _scaled_operand(graph, shift, 3.0, shift=True)
        user = rw.sole_consumer(clip.outputs[0])
        if x is None or user is None:
            continue
        if _scaled_operand(graph, user, 1.0 / 6.0) == clip.outputs[0]:  # r / 6: a hard sigmoid...
            gate = rw.sole_consumer(user.outputs[0])
            if _is_product(gate, x, user.outputs[0]):                   # ... times x: hard swish
                rw.replace([shift, clip, user, gate], x, Activation("HardSwish"))
            else:
                rw.replace([shift, clip, user], x, Activation("HardSigmoid", (1.0 / 6.0, 0.5)))
        elif _is_product(user, x, clip.outputs[0]):                       # (x * r) / 6
            scale = rw.sole_consumer(user.outputs[0])
            if _scaled_operand(graph, scale, 1.0 / 6.0) == user.outputs[0]:
                rw.replace([shift, clip, user, scale], x, Activation("HardSwish"))
    return rw.finish()


class _ChainRewriter:
    """Replaces chains of nodes by one activation node each. Producers and consumers are kept
    current as chains go (a pass over a big graph stays linear); the node list is rewritten once,
    by ``finish``."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.producers = graph.producers()
        self.consumers = graph.consumers()
        self.removed: set[int] = set()
        self.replacements: dict[int, Node] = {}  # id(the chain's last node) -> its activation node

    def candidates(self, *ops: str) -> list[Node]:
        return [n for n in self.graph.nodes if n.op in ops]

    def producer(self, tensor: str | None) -> Node | None:
        return self.producers.get(tensor) if tensor else None

    def sole_consumer(self, tensor: str) -> Node | None:
        users = self.consumers.get(tensor, [])
        return users[0] if len(users) == 1 and tensor not in self.graph.outputs else None

    def replace(self, chain: list[Node], x: str, act: Activation) -> None:
        """``chain`` (its last node computes the result from ``x``) becomes one node, unless
        something outside the chain reads an intermediate or the result's shape is not x's."""
        if not self._replaceable(chain, x):
            return
        final = chain[-1]
        node = Node(act.kind, final.name, [x], [final.outputs[0]], {"activation": act})
        for member in chain:
            self.removed.add(id(member))
            for name in filter(None, member.inputs):
                self.consumers[name] = [u for u in self.consumers.get(name, []) if u is not member]
        self.consumers.setdefault(x, []).append(node)
        self.producers[final.outputs[0]] = node
        self.replacements[id(final)] = node

    def _replaceable(self, chain: list[Node], x: str) -> bool:
        members = {id(n) for n in chain}
        if len(members) != len(chain) or members & self.removed or any("fused_activation" in n.attrs for n in chain):
            return False
        for node in chain[:-1]:
            for out in node.outputs:
                if out in self.graph.outputs or any(id(u) not in members for u in self.consumers.get(out, [])):
                    return False
        return self.graph.tensors[x].shape == self.graph.tensors[chain[-1].outputs[0]].shape

    def finish(self) -> int:
        """Put each activation node where its chain's last node was (after everything it reads)."""
        self.graph.nodes = [self.replacements.get(id(n), n) for n in self.graph.nodes
                            if id(n) not in self.removed or id(n) in self.replacements]
        self.graph.remove_unused_tensors()
        return len(self.replacements)


def _gated_activation(gate: Activation) -> Activation | None:
    """The activation x * gate(x) is, for the gates that have one."""
    if gate.kind == "Sigmoid":
        return Activation("Swish", (1.0,))
    if gate.kind == "HardSigmoid" and np.allclose(gate.params, (1.0 / 6.0, 0.5), rtol=_RTOL, atol=0.0):
        return Activation("HardSwish")
    return None


_RTOL = 1e-6  # a few float32 ulps: exporters round 1/sqrt(2) and friends differently


def _is_product(node: Node | None, a: str, b: str) -> bool:
    return node is not None and node.op == "Mul" and sorted(node.inputs[:2]) == sorted([a, b])


def _scalar(graph: Graph, name: str) -> float | None:
    value = graph.const(name)
    return float(value.reshape(-1)[0]) if value is not None and value.size == 1 and value.dtype.kind == "f" else None


def _near(value: float | None, want: float) -> bool:
    return value is not None and math.isclose(value, want, rel_tol=_RTOL)


def _scaled_operand(graph: Graph, node: Node | None, factor: float, shift: bool = False) -> str | None:
    """The run-time operand v of ``node`` when it computes v * factor (Mul by factor or Div by its
    inverse; ``shift``: v + factor, an Add), either operand order; None otherwise."""
    if node is None or node.op not in ("Add", "Mul", "Div") or "fused_activation" in node.attrs:
        return None
    a, b = node.inputs[:2]
    if node.op == ("Add" if shift else "Mul"):
        for operand, constant in ((a, b), (b, a)):
            if graph.const(operand) is None and _near(_scalar(graph, constant), factor):
                return operand
    if node.op == "Div" and not shift and graph.const(a) is None and _near(_scalar(graph, b), 1.0 / factor):
        return a
    return None


def _half_x_times(rw: _ChainRewriter, x: str, a: str) -> list[Node] | None:
    """The nodes of 0.5 * x * a, grouped (x * a) * 0.5, (x * 0.5) * a or x * (a * 0.5); the last
    computes the result."""
    first = rw.sole_consumer(a)
    if first is None or first.op != "Mul" or a not in first.inputs[:2]:
        return None
    other = first.inputs[1] if first.inputs[0] == a else first.inputs[0]
    second = rw.sole_consumer(first.outputs[0])
    if other == x and _scaled_operand(rw.graph, second, 0.5) == first.outputs[0]:
        return [first, second]                                         # (x * a) * 0.5
    if _near(_scalar(rw.graph, other), 0.5) and _is_product(second, x, first.outputs[0]):
        return [first, second]                                         # x * (a * 0.5)
    half = rw.producer(other)
    if _scaled_operand(rw.graph, half, 0.5) == x:
        return [half, first]                                           # (x * 0.5) * a
    return None


def _x_plus_cubic(rw: _ChainRewriter, add: Node | None) -> tuple[str, list[Node]] | None:
    """(x, nodes) when ``add`` computes x + 0.044715 * x^3 (x^3 = Pow(x, 3), x * (x * x) or (x * x) * x)."""
    if add is None or add.op != "Add" or "fused_activation" in add.attrs:
        return None
    for x, term in (add.inputs[:2], add.inputs[1::-1]):
        scale = rw.producer(term)
        cube = rw.producer(_scaled_operand(rw.graph, scale, 0.044715))
        power = _cube_nodes(rw, cube, x) if cube is not None else None
        if power is not None:
            return x, [*power, scale, add]
    return None


def _cube_nodes(rw: _ChainRewriter, cube: Node, x: str) -> list[Node] | None:
    if cube.op == "Pow" and cube.inputs[0] == x and _near(_scalar(rw.graph, cube.inputs[1]), 3.0):
        return [cube]
    if cube.op != "Mul" or x not in cube.inputs[:2]:
        return None
    square = rw.producer(cube.inputs[1] if cube.inputs[0] == x else cube.inputs[0])
    if square is not None and square.op == "Mul" and square.inputs[:2] == [x, x]:
        return [square, cube]
    return None


def fuse_activations(graph: Graph) -> int:
    """Move a stand-alone activation into the op that produces its input."""
    fused = 0
    # The maps are built once (per activation they made this pass quadratic: 4 ms of
    # MobileNetV2's session creation): a fusion changes only who writes the activation's output,
    # and the readers of the tensor it removes, which no other activation reads.
    consumers, producers = graph.consumers(), graph.producers()
    for act in [n for n in graph.nodes if n.op in ACTIVATION_PARAMS]:
        producer = producers.get(act.inputs[0])
        if (producer is None or producer.op not in FUSABLE_PRODUCERS
                or "fused_activation" in producer.attrs or not act.attrs["activation"].fusable
                or not _single_internal_use(graph, act.inputs[0], consumers)):
            continue
        producer.attrs["fused_activation"] = act.attrs["activation"]
        _absorb(graph, producer, act)
        producers[act.outputs[0]] = producer
        fused += 1
    graph.remove_unused_tensors()
    return fused


def _absorb(graph: Graph, producer: Node, follower: Node) -> None:
    """``producer`` now computes ``follower``'s output; ``follower`` goes away."""
    intermediate = producer.outputs[0]
    producer.outputs[0] = follower.outputs[0]
    graph.nodes.remove(follower)
    del graph.tensors[intermediate]


def eliminate_dead_nodes(graph: Graph) -> int:
    """Remove nodes that no graph output depends on, then unused tensors."""
    needed = set(graph.outputs)
    kept: list[Node] = []
    for node in reversed(graph.nodes):
        if any(o in needed for o in node.outputs if o):
            kept.append(node)
            needed.update(i for i in node.inputs if i)
    removed = len(graph.nodes) - len(kept)
    graph.nodes = kept[::-1]
    graph.remove_unused_tensors()
    return removed
