"""Build one-node ONNX models for op tests."""
from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper


def single_node_model(op: str, x_shape: tuple[int, ...], constants: dict[str, np.ndarray] | None = None,
                      opset: int = 17, extra_inputs: list[str] | None = None, n_outputs: int = 1,
                      **attrs) -> onnx.ModelProto:
    """Model ``y = op(x, *constants, **attrs)``; constants become initializers, in order.

    ``extra_inputs`` lets a test name inputs explicitly ("" for an omitted optional input)."""
    constants = constants or {}
    names = ["x"] + (extra_inputs if extra_inputs is not None else list(constants))
    outputs = [f"y{i}" if i else "y" for i in range(n_outputs)]
    node = oh.make_node(op, names, outputs, **attrs)
    inits = [onnx.numpy_helper.from_array(np.asarray(v), k) for k, v in constants.items()]
    graph = oh.make_graph(
        [node], op.lower(), [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, list(x_shape))],
        [oh.make_empty_tensor_value_info(o) for o in outputs], inits)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def graph_model(nodes: list[onnx.NodeProto], inputs: dict[str, tuple[int, ...]], outputs: list[str],
                constants: dict[str, np.ndarray] | None = None, opset: int = 17) -> onnx.ModelProto:
    """Model of ``nodes`` with float graph inputs of the given shapes; ``constants`` become
    initializers; ``outputs`` are the graph outputs (shapes left to inference)."""
    graph = oh.make_graph(
        nodes, "g", [oh.make_tensor_value_info(n, onnx.TensorProto.FLOAT, list(s)) for n, s in inputs.items()],
        [oh.make_empty_tensor_value_info(o) for o in outputs],
        [onnx.numpy_helper.from_array(np.asarray(v), k) for k, v in (constants or {}).items()])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    model.ir_version = 8 if opset < 21 else 10
    return model
