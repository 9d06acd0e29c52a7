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

import numpy as np

from ..errors import EdgeSDKError, UnsupportedModelError
from ..graph import Graph, Node
from ..ops import OPS

try:
    import torch
    import torch.nn.functional as F
    from torch import nn
except ImportError:  # pragma: no cover - exercised only without the train extra
    raise EdgeSDKError("fine-tuning needs PyTorch: pip install torch (or, in the edgesdk source checkout, pip install -e '.[train]')") from None

TRAINABLE_OPS = ("Conv", "Gemm")
TORCH_OPS = frozenset(name for name, spec in OPS.items() if spec.runs and spec.torch is not None)


class _StraightThrough(torch.autograd.Function):
    """Forward: ``q`` exactly (not ``x + (q - x).detach()``, which rounds and turns +-Inf into
    NaN); backward: the gradient to ``x`` times ``mask`` (1 where it passes, 0 where it is clipped;
    None: everywhere)."""

    @staticmethod
    def forward(ctx, x, q, mask):
        ctx.save_for_backward(mask)
        ctx.has_mask = mask is not None
        return q.clone()

    @staticmethod
    def backward(ctx, grad):
        (mask,) = ctx.saved_tensors
        return (grad * mask if ctx.has_mask else grad), None, None


def straight_through(x: torch.Tensor, q: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """A quantizer's output ``q`` whose gradient passes straight through to ``x`` (the STE of
    LQ-Nets and of quantization-aware training), where ``mask`` is 1."""
    return _StraightThrough.apply(x, q.detach(), mask)


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
            if node.op not in TORCH_OPS:
                raise UnsupportedModelError(
                    f"node {node.name!r}: op {node.op!r} has no torch implementation for fine-tuning; "
                    f"supported: {', '.join(sorted(TORCH_OPS))}")
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

    def environment(self, inputs: tuple[torch.Tensor, ...]) -> dict[str, torch.Tensor]:
        """Tensor name -> value before the first node runs: parameters, constant buffers, inputs."""
        if len(inputs) != len(self.input_names):
            raise TypeError(f"the graph takes {len(self.input_names)} inputs ({', '.join(self.input_names)}), "
                            f"got {len(inputs)}")
        env: dict[str, torch.Tensor] = dict(self.tensor_params)
        env.update((name, getattr(self, attr)) for name, attr in self._buffer_of.items())
        env.update(zip(self.input_names, inputs))
        return env

    def forward(self, *inputs: torch.Tensor):
        return self.run_nodes(self.environment(inputs))

    def node_arguments(self, node: Node, args: list) -> list:
        """A node's inputs as its lowering receives them (subclasses quantize or capture them)."""
        return args

    def run_nodes(self, env: dict):
        """Every node in order on ``env`` (inputs and parameters by tensor name); the outputs."""
        for node in self.nodes:
            args = self.node_arguments(node, [env[name] if name else None for name in node.inputs])
            out = OPS[node.op].torch(self, node, *args)  # the op's torch lowering (edgesdk.ops)
            outs = out if isinstance(out, tuple) else (out,)
            fused = node.attrs.get("fused_activation")
            if fused is not None:
                outs = (apply_activation(fused, outs[0]),) + outs[1:]
            for name, value in zip(node.outputs, outs):
                if name:
                    env[name] = value
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


def apply_activation(act, x: torch.Tensor) -> torch.Tensor:
    """The torch twin of :meth:`edgesdk.runtime.activations.Activation.apply`."""
    return act.apply_torch(x)


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
