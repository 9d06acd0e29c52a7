"""QDQ models -> integer ops.

ONNX Runtime's ``quantize_static`` (QDQ format) and PyTorch's PT2E export write a quantized model
as float ops wrapped in DequantizeLinear / QuantizeLinear pairs:

    x_q -> DQ -> Conv(DQ(w_q), DQ(b_q)) -> [Relu | Clip] -> Q -> y_q

:func:`fuse_qdq` turns each such island into the integer op that computes it (QLinearConv,
QLinearMatMul, QGemm, QLinearAdd, QLinearMul, QLinearGlobalAveragePool, QLinearAveragePool,
QLinearConcat), with a following Relu/Clip folded into the output clamp (qmin/qmax); ops that only
move values (MaxPool, Reshape, Transpose, ...) between equal parameters run on the 8-bit tensor
itself. What cannot fuse stays float between its DQ and Q nodes, which the backends run as they
are (and ``placements`` shows). :func:`int8_activations_to_uint8` then moves int8 activations to
uint8 (zero point + 128: the same real values), the type the cpu kernels take.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..graph import Graph, Node
from ..ops import evaluate
from ..runtime.activations import ACTIVATION_PARAMS
from ..ops.quantize import INTEGER_PASSTHROUGH, codes, QUANTIZED_DTYPES, QUANTIZED_OUTPUT, dtype_range, quantized_inputs

_WINDOW = ("kernel_shape", "strides", "dilations", "pads")


@dataclass(frozen=True)
class QParams:
    """A per-tensor (scale, zero point) pair of an 8-bit tensor: the names of its constants."""
    scale: str
    zero_point: str

    def values(self, graph: Graph) -> tuple[float, int]:
        return float(graph.const(self.scale).reshape(-1)[0]), int(graph.const(self.zero_point).reshape(-1)[0])


def per_tensor(g: Graph, node: Node) -> bool:
    """A Q or DQ node with one constant scale and one constant zero point."""
    scale, zp = g.const(node.inputs[1]), g.const(node.input(2))
    return scale is not None and scale.size == 1 and zp is not None and zp.size == 1


class _Fuser:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.producers = graph.producers()
        self.consumers = graph.consumers()

    # -- what feeds an op, what it feeds ------------------------------------------------------
    def dequantized(self, name: str | None) -> Node | None:
        """The DequantizeLinear producing ``name`` with per-tensor constant parameters, if any."""
        node = self.producers.get(name) if name else None
        if node is None or node.op != "DequantizeLinear" or not self.per_tensor(node):
            return None
        return node

    def per_tensor(self, node: Node) -> bool:
        return per_tensor(self.graph, node)

    def sole_user(self, name: str) -> Node | None:
        users = self.consumers.get(name, [])
        if len(users) != 1 or name in self.graph.outputs:
            return None
        return users[0]

    def output_chain(self, node: Node) -> tuple[list[Node], Node] | None:
        """The nodes from ``node``'s output to the QuantizeLinear that ends the island: optional
        Relu / Clip, then a per-tensor Q (8-bit)."""
        chain: list[Node] = []
        current = node
        while True:
            user = self.sole_user(current.outputs[0])
            if user is None:
                return None
            if user.op == "QuantizeLinear" and self.per_tensor(user) and \
                    self.graph.tensors[user.outputs[0]].dtype in QUANTIZED_DTYPES:
                return chain, user
            if user.op in ("Relu", "Clip") and not chain:
                chain.append(user)
                current = user
                continue
            return None

    def clamp(self, chain: list[Node], q: Node) -> dict[str, int]:
        """qmin/qmax of a folded Relu / Clip in the output's quantized domain."""
        lo, hi = dtype_range(self.graph.tensors[q.outputs[0]].dtype)
        if not chain:
            return {"qmin": lo, "qmax": hi}
        scale, zp = QParams(q.inputs[1], q.inputs[2]).values(self.graph)
        act = chain[0].attrs["activation"]
        low, high = (0.0, None) if act.kind == "Relu" else (act.param("min"), act.param("max"))

        def quant(v: float) -> int:
            return int(np.clip(np.rint(np.float32(v) / np.float32(scale)) + zp, lo, hi))

        out = {"qmin": lo, "qmax": hi}
        if low is not None and np.isfinite(low):
            out["qmin"] = quant(low)
        if high is not None and np.isfinite(high):
            out["qmax"] = quant(high)
        return out

    def full_range(self, clamp: dict, q: Node) -> bool:
        """True when the clamp is the output type's whole range (no activation folded)."""
        return (clamp["qmin"], clamp["qmax"]) == dtype_range(self.graph.tensors[q.outputs[0]].dtype)

    # -- the rewrite ----------------------------------------------------------------------------
    def fuse(self, node: Node) -> bool:
        make = _BUILDERS.get(node.op)
        if make is None:
            return False
        ends = self.output_chain(node)
        if ends is None:
            return False
        chain, q = ends
        built = make(self, node, q, self.clamp(chain, q))
        if built is None:
            return False
        index = self.graph.nodes.index(node)
        self.graph.nodes[index] = built
        for gone in chain + [q]:
            self.graph.nodes.remove(gone)
        for name in [node.outputs[0]] + [c.outputs[0] for c in chain]:
            self.graph.tensors.pop(name, None)
        self.producers = self.graph.producers()
        self.consumers = self.graph.consumers()
        return True

    def int_weight(self, name: str | None, axis_ok: tuple[int, ...]) -> Node | None:
        """The DQ of a constant 8-bit weight, per tensor or per channel along an allowed axis."""
        node = self.producers.get(name) if name else None
        g = self.graph
        if node is None or node.op != "DequantizeLinear" or g.const(node.inputs[0]) is None:
            return None
        if g.tensors[node.inputs[0]].dtype not in QUANTIZED_DTYPES or g.const(node.inputs[1]) is None:
            return None
        if node.input(2) is None or g.const(node.input(2)) is None:
            return None
        rank = len(g.tensors[node.inputs[0]].shape)
        if g.const(node.inputs[1]).size > 1 and node.attrs.get("axis", 1) % rank not in axis_ok:
            return None
        return node

    def int32_bias(self, name: str | None, x: Node, w: Node, channels: int) -> str | None | bool:
        """The int32 bias constant for an integer op: the DQ'd int32 one when its scale is the
        product of the input and weight scales (ONNX Runtime writes it so), else the float bias
        quantized at that scale. None without a bias, False when it cannot be had."""
        if name is None:
            return None
        g = self.graph
        x_scale = np.float32(g.const(x.inputs[1]).reshape(-1)[0])
        w_scale = np.broadcast_to(g.const(w.inputs[1]).astype(np.float32).reshape(-1), (channels,))
        want = (x_scale * w_scale).astype(np.float32)
        dq = self.producers.get(name)
        if dq is not None and dq.op == "DequantizeLinear" and g.const(dq.inputs[0]) is not None and \
                g.tensors[dq.inputs[0]].dtype == np.int32 and g.const(dq.inputs[1]) is not None:
            scale = np.broadcast_to(g.const(dq.inputs[1]).astype(np.float32).reshape(-1), (channels,))
            zp = g.const(dq.input(2)) if dq.input(2) else None
            if np.array_equal(scale, want) and (zp is None or not np.any(zp)):
                return dq.inputs[0]
            value = (g.const(dq.inputs[0]).astype(np.float64) - (0 if zp is None else zp)) * scale
        else:
            value = g.const(name)
            if value is None:
                return False
        value = np.broadcast_to(np.asarray(value, np.float64).reshape(-1), (channels,))
        quantized = np.rint(value / np.maximum(want.astype(np.float64), np.finfo(np.float32).tiny))
        if np.any(np.abs(quantized) > 2 ** 31 - 1):
            return False
        out = g.unique_name(f"{name}.int32")
        g.add_constant(out, quantized.astype(np.int32))
        return out


def _conv(f: _Fuser, node: Node, q: Node, clamp: dict) -> Node | None:
    x = f.dequantized(node.inputs[0])
    w = f.int_weight(node.inputs[1], axis_ok=(0,))
    if x is None or w is None:
        return None
    bias = f.int32_bias(node.input(2), x, w, f.graph.tensors[node.inputs[1]].shape[0])
    if bias is False:
        return None
    attrs = {k: node.attrs[k] for k in _WINDOW} | {"group": node.attrs["group"]} | clamp
    inputs = [x.inputs[0], x.inputs[1], x.inputs[2], w.inputs[0], w.inputs[1], w.inputs[2], q.inputs[1], q.inputs[2]]
    return Node("QLinearConv", node.name, inputs + ([bias] if bias else []), [q.outputs[0]], attrs)


def _matmul(f: _Fuser, node: Node, q: Node, clamp: dict) -> Node | None:
    a = f.dequantized(node.inputs[0])
    b = f.int_weight(node.inputs[1], axis_ok=(1,))
    if a is None or b is None or len(f.graph.tensors[node.inputs[1]].shape) != 2:
        return None
    inputs = [a.inputs[0], a.inputs[1], a.inputs[2], b.inputs[0], b.inputs[1], b.inputs[2], q.inputs[1], q.inputs[2]]
    return Node("QLinearMatMul", node.name, inputs, [q.outputs[0]], dict(clamp))


def _gemm(f: _Fuser, node: Node, q: Node, clamp: dict) -> Node | None:
    at = node.attrs
    if at["alpha"] != 1.0 or at["transA"] or (node.input(2) and at["beta"] != 1.0):
        return None
    a = f.dequantized(node.inputs[0])
    b = f.int_weight(node.inputs[1], axis_ok=(0,) if at["transB"] else (1,))
    if a is None or b is None:
        return None
    b_shape = f.graph.tensors[node.inputs[1]].shape
    columns = b_shape[0] if at["transB"] else b_shape[1]
    c = node.input(2)
    if c is not None and f.graph.tensors[c].shape not in ((columns,), (1, columns)):
        return None
    bias = f.int32_bias(c, a, b, columns)
    if bias is False:
        return None
    inputs = [a.inputs[0], a.inputs[1], a.inputs[2], b.inputs[0], b.inputs[1], b.inputs[2], bias or "",
              q.inputs[1], q.inputs[2]]
    return Node("QGemm", node.name, inputs, [q.outputs[0]], {"transA": False, "transB": at["transB"]} | clamp)


def _binary(f: _Fuser, node: Node, q: Node, clamp: dict) -> Node | None:
    a, b = f.dequantized(node.inputs[0]), f.dequantized(node.inputs[1])
    if a is None or b is None:
        return None
    inputs = [a.inputs[0], a.inputs[1], a.inputs[2], b.inputs[0], b.inputs[1], b.inputs[2], q.inputs[1], q.inputs[2]]
    return Node(f"QLinear{node.op}", node.name, inputs, [q.outputs[0]], dict(clamp))


def _pool(f: _Fuser, node: Node, q: Node, clamp: dict) -> Node | None:
    x = f.dequantized(node.inputs[0])
    if x is None or not f.full_range(clamp, q):
        return None
    inputs = [x.inputs[0], x.inputs[1], x.inputs[2], q.inputs[1], q.inputs[2]]
    if node.op == "GlobalAveragePool":
        if len(f.graph.tensors[node.inputs[0]].shape) != 4:
            return None
        return Node("QLinearGlobalAveragePool", node.name, inputs, [q.outputs[0]], {})
    attrs = {k: node.attrs[k] for k in _WINDOW + ("ceil_mode", "count_include_pad")}
    return Node("QLinearAveragePool", node.name, inputs, [q.outputs[0]], attrs)


def _concat(f: _Fuser, node: Node, q: Node, clamp: dict) -> Node | None:
    parts = [f.dequantized(i) for i in node.inputs]
    if any(p is None for p in parts) or not f.full_range(clamp, q):
        return None
    inputs = [q.inputs[1], q.inputs[2]] + [name for p in parts for name in p.inputs[:3]]
    return Node("QLinearConcat", node.name, inputs, [q.outputs[0]], {"axis": node.attrs["axis"]})


def _passthrough(f: _Fuser, node: Node, q: Node, clamp: dict) -> Node | None:
    """An op that moves values runs on the 8-bit tensor when its DQ and Q parameters agree."""
    x = f.dequantized(node.inputs[0])
    if x is None or not f.full_range(clamp, q) or any(f.graph.const(i) is None for i in node.inputs[1:] if i):
        return None
    g = f.graph
    if g.tensors[x.inputs[0]].dtype != g.tensors[q.outputs[0]].dtype or \
            QParams(x.inputs[1], x.inputs[2]).values(g) != QParams(q.inputs[1], q.inputs[2]).values(g):
        return None
    return Node(node.op, node.name, [x.inputs[0]] + node.inputs[1:], [q.outputs[0]], dict(node.attrs))


def _lookup(f: _Fuser, node: Node, q: Node, clamp: dict) -> Node | None:
    """A unary float op between per-tensor DQ and Q is a 256-entry table of output codes."""
    x = f.dequantized(node.inputs[0])
    if x is None or not f.full_range(clamp, q) or len(node.inputs) != 1:
        return None
    g = f.graph
    in_dtype = g.tensors[x.inputs[0]].dtype
    values = codes(in_dtype)
    consts = lambda n: [g.const(i) if i else None for i in n.inputs[1:]]  # noqa: E731
    (real,) = evaluate(x, [values] + consts(x))
    (out,) = evaluate(node, [real])
    (table,) = evaluate(q, [out] + consts(q))
    name = g.unique_name(f"{node.name}.table")
    g.add_constant(name, np.ascontiguousarray(table))
    return Node("QLinearLookup", node.name, [x.inputs[0], name, x.inputs[1], x.inputs[2], q.inputs[1], q.inputs[2]],
                [q.outputs[0]], {"activation": node.attrs["activation"]})


_BUILDERS = {"Conv": _conv, "MatMul": _matmul, "Gemm": _gemm, "Add": _binary, "Mul": _binary,
             "GlobalAveragePool": _pool, "AveragePool": _pool, "Concat": _concat,
             **{op: _passthrough for op in INTEGER_PASSTHROUGH},
             **{op: _lookup for op in ACTIVATION_PARAMS if op not in INTEGER_PASSTHROUGH}}


def fuse_qdq(graph: Graph) -> int:
    """Fuse every DQ -> op -> Q island into an integer op; returns how many. Unused DQ nodes and
    tensors are dropped."""
    if not any(n.op == "QuantizeLinear" for n in graph.nodes):
        return 0
    fuser = _Fuser(graph)
    fused = sum(fuser.fuse(node) for node in list(graph.nodes))
    fused += _drop_requantize_pairs(graph)
    _drop_dead_dequantize(graph)
    graph.remove_unused_tensors()
    return fused


def _drop_requantize_pairs(graph: Graph) -> int:
    """x_q -> DQ -> Q with the same parameters and type is x_q itself."""
    producers = graph.producers()  # removing a Q changes no DQ's producer
    renamed: dict[str, str] = {}
    for q in [n for n in graph.nodes if n.op == "QuantizeLinear"]:
        dq = producers.get(q.inputs[0])
        if dq is None or dq.op != "DequantizeLinear" or q.outputs[0] in graph.outputs or \
                graph.tensors[dq.inputs[0]].dtype != graph.tensors[q.outputs[0]].dtype or \
                not (per_tensor(graph, dq) and per_tensor(graph, q)) or \
                QParams(dq.inputs[1], dq.inputs[2]).values(graph) != QParams(q.inputs[1], q.inputs[2]).values(graph):
            continue
        graph.nodes.remove(q)
        renamed[q.outputs[0]] = renamed.get(dq.inputs[0], dq.inputs[0])  # nodes come in graph order
    for node in graph.nodes:
        node.inputs = [renamed.get(i, i) for i in node.inputs]
    return len(renamed)


def _drop_dead_dequantize(graph: Graph) -> None:
    while True:
        used = set(graph.outputs) | {i for n in graph.nodes for i in n.inputs if i}
        dead = [n for n in graph.nodes if n.op == "DequantizeLinear" and n.outputs[0] not in used]
        if not dead:
            return
        for node in dead:
            graph.nodes.remove(node)


# -- int8 activations -> uint8 --------------------------------------------------------------------
def int8_activations_to_uint8(graph: Graph) -> int:
    """Give every int8 activation tensor that only integer ops touch the uint8 type and zero
    point + 128 (q_u8 = q_s8 + 128 represents the same real value exactly), through the ops that
    move values; graph inputs and outputs keep their type. Returns the tensors changed."""
    producers, consumers = graph.producers(), graph.consumers()
    interface = set(graph.inputs) | set(graph.outputs)
    changed = 0
    seen: set[str] = set()
    for name, tensor in list(graph.tensors.items()):
        if tensor.dtype != np.int8 or tensor.is_constant or name in seen:
            continue
        group = _passthrough_group(name, producers, consumers)
        seen |= group
        ends = _zero_point_uses(group, producers, consumers)
        if ends is None or group & interface or any(graph.tensors[t].dtype != np.int8 for t in group):
            continue
        for node, zp_index in ends:
            old = node.inputs[zp_index]
            value = graph.const(old)
            if value is None or value.dtype != np.int8:
                break
        else:
            for node, zp_index in ends:
                old = node.inputs[zp_index]
                new = graph.unique_name(f"{old}.u8")
                graph.add_constant(new, _as_uint8(graph.const(old)))
                node.inputs[zp_index] = new
            for node, zp_index in ends:
                if node.outputs[0] in group and "qmin" in node.attrs:  # the clamp moves with the codes
                    node.attrs["qmin"] += 128
                    node.attrs["qmax"] += 128
                if node.outputs[0] in group and node.op == "QLinearLookup":  # so do the table's codes
                    table = graph.unique_name(f"{node.inputs[1]}.u8")
                    graph.add_constant(table, _as_uint8(graph.const(node.inputs[1])))
                    node.inputs[1] = table
            for t in group:
                graph.tensors[t].dtype = np.dtype(np.uint8)
            changed += len(group)
    changed += _constant_operands_to_uint8(graph)
    graph.remove_unused_tensors()
    return changed


def _as_uint8(codes: np.ndarray) -> np.ndarray:
    """int8 codes (or zero points) as the uint8 ones of the same real values: + 128."""
    return (codes.astype(np.int16) + 128).astype(np.uint8)


def _constant_operands_to_uint8(graph: Graph) -> int:
    """The int8 constant operands (codes and zero point) of Add, Mul and Concat whose run-time
    operands are uint8 now, moved the same way, so the op takes one type (a bias or scale
    ONNX Runtime quantized with the activations' int8)."""
    changed = 0
    for node in graph.nodes:
        if node.op not in ("QLinearAdd", "QLinearMul", "QLinearConcat"):
            continue
        spots = quantized_inputs(node)
        runtime = [i for i in spots if not graph.tensors[node.inputs[i]].is_constant]
        if not runtime or any(graph.tensors[node.inputs[i]].dtype != np.uint8 for i in runtime):
            continue
        for i, (_, zp_index) in spots.items():
            codes, zp = graph.const(node.inputs[i]), graph.const(node.input(zp_index)) if node.input(zp_index) else None
            if i in runtime or codes is None or codes.dtype != np.int8 or zp is None or zp.dtype != np.int8:
                continue
            for index, value in ((i, codes), (zp_index, zp)):
                name = graph.unique_name(f"{node.inputs[index]}.u8")
                graph.add_constant(name, _as_uint8(value))
                node.inputs[index] = name
            changed += 1
    return changed


def _passthrough_group(name: str, producers, consumers) -> set[str]:
    """``name`` and the tensors value-moving ops connect it to (they share its parameters)."""
    group, todo = set(), [name]
    while todo:
        t = todo.pop()
        if t in group:
            continue
        group.add(t)
        p = producers.get(t)
        if p is not None and p.op in INTEGER_PASSTHROUGH:
            todo.append(p.inputs[0])
        for user in consumers.get(t, []):
            if user.op in INTEGER_PASSTHROUGH and user.inputs[0] == t:
                todo.extend(user.outputs)
    return group


def _zero_point_uses(group: set[str], producers, consumers) -> list[tuple[Node, int]] | None:
    """(node, zero point input index) of every integer op that reads or writes the group; None if
    some op outside the integer ops and the value-moving ones touches it."""
    uses: list[tuple[Node, int]] = []
    for t in group:
        p = producers.get(t)
        if p is not None and p.op not in INTEGER_PASSTHROUGH:
            spot = QUANTIZED_OUTPUT.get(p.op)
            if spot is None or p.input(spot[1]) is None:
                return None
            uses.append((p, spot[1]))
        for user in consumers.get(t, []):
            if user.op in INTEGER_PASSTHROUGH and user.inputs[0] == t:
                continue
            found = [zp for i, (_, zp) in quantized_inputs(user).items() if user.inputs[i] == t]
            if not found or any(user.input(zp) is None for zp in found):
                return None
            uses.extend((user, zp) for zp in found)
    return uses
