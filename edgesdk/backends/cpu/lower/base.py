"""The cpu backend's op table (op type -> lowering) and what every family's lowering shares.

Lowerings live in ``lower/<family>.py``, one file per family of ``edgesdk/ops``.

A lowering reads the node's normalised attributes (see ``onnx_import``), prepares weights and
kernel plans, asks the :class:`~.program.Builder` for buffers, and emits one step whose runner
calls a native kernel (placement ``native``), a numpy routine writing into the arena
(``numpy``: copies, layout moves, rare broadcasts), nothing at all (``view``), or the reference
backend's kernel for that node (``reference``, with the reason in the step note). Every op the
reference backend runs has an entry; ``fallback`` is the explicit route for the shapes a native
kernel does not cover.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ....graph import Node
from ....runtime.activations import ACTIVATION_PARAMS, Activation
from ....runtime.fallback import FALLBACK_PLACEMENT, ReferenceStep
from ..program import NCHW, Builder, Runner, Views

Lowering = Callable[[Node, Builder], None]
LOWERINGS: dict[str, Lowering] = {}
ACTIVATION_OPS = tuple(ACTIVATION_PARAMS)


# Ops whose lowering always runs the reference kernel (no native kernel yet; the README says so).
REFERENCE_ONLY: set[str] = set()


def lowering(*ops: str, reference_only: bool = False) -> Callable[[Lowering], Lowering]:
    def register(fn: Lowering) -> Lowering:
        for op in ops:
            LOWERINGS[op] = fn
            if reference_only:
                REFERENCE_ONLY.add(op)
        return fn
    return register


def native_kernels():
    from .... import _native
    return _native.kernels


ActArgs = tuple[str, "float | None", "float | None"]
# The native kernels' names of the activations without parameters.
_NATIVE_NAMES = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Erf": "erf", "Exp": "exp", "Log": "log",
                 "Abs": "abs", "Sqrt": "sqrt", "Reciprocal": "reciprocal", "Neg": "neg", "Softplus": "softplus",
                 "Mish": "mish"}
# Activations the GEMM microkernels cannot apply as a clamp in registers (a vector pass follows).
POST_PASS_ACTIVATIONS = frozenset({"sigmoid", "tanh", "hardswish", "hardsigmoid", "leaky_relu", "gelu", "gelu_tanh",
                                   "silu", "square"} | set(_NATIVE_NAMES.values()) - {"relu"})
NO_ACT: ActArgs = ("none", None, None)


def act_args(act: Activation | None) -> ActArgs:
    """The native kernels' (name, alpha, beta) for a fused activation descriptor. Every kind
    with ``act.fusable`` has one (a Swish of another slope has none: ValueError)."""
    if act is None:
        return NO_ACT
    if act.kind == "Clip":
        lo, hi = act.params
        return ("relu6", None, None) if (lo, hi) == (0.0, 6.0) else ("clip", float(lo), float(hi))
    if act.kind == "LeakyRelu":
        return ("leaky_relu", float(act.params[0]), None)
    if act.kind == "HardSigmoid":
        return ("hardsigmoid", float(act.params[0]), float(act.params[1]))
    if act.kind == "HardSwish":
        return ("hardswish", 1.0 / 6.0, 0.5)
    if act.kind == "Gelu":
        return ("gelu" if act.gelu_approximation == "none" else "gelu_tanh", None, None)
    if act.kind == "Swish":
        if not act.fusable:
            raise ValueError(f"{act} has no native kernel")
        return ("silu", None, None)
    return (_NATIVE_NAMES[act.kind], None, None)


def fused_act(node: Node) -> ActArgs:
    return act_args(node.attrs.get("fused_activation"))


def in_order(runners: list[Runner]) -> Runner:
    """One runner for ``runners`` in order: a native Step when every part is one (the run loop
    then stays in C++), else a Python loop."""
    k = native_kernels()
    if len(runners) == 1:
        return runners[0]
    if all(isinstance(r, k.Step) for r in runners):
        return k.steps.chain(runners)

    def run() -> None:
        for runner in runners:
            runner()
    return run


def then_activate(run: Runner, out: np.ndarray, act: ActArgs, threads: int) -> Runner:
    """``run`` followed by the activation in place on ``out`` (for routines without a fused one)."""
    if act == NO_ACT:
        return run
    return in_order([run, native_kernels().steps.activation(out, *act, threads)])


# -- fallback -----------------------------------------------------------------------------------
def fallback(node: Node, b: Builder, reason: str) -> None:
    """Run the node on its reference kernel (``runtime.fallback``: the mechanism every backend
    shares), fused activation included, on graph-order views of the arena, copying its result
    into the arena; recorded with its reason."""
    step = ReferenceStep.prepare(node, b.graph, b.precision, reason)
    slots = [b.read_stored(name) for name in step.runtime_inputs]
    outs = [b.write(name, NCHW) if name else None for name in node.outputs]

    def bind(v: Views) -> Runner:
        ins = [v.logical(s) for s in slots]
        dsts = [v[o] if o is not None else None for o in outs]

        def run() -> None:
            for dst, value in zip(dsts, step(ins)):
                if dst is not None:
                    np.copyto(dst, value)
        return run
    b.emit(node, FALLBACK_PLACEMENT, bind, reason)
