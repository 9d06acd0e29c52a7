"""The ONNX backend node tests for the ops edgesdk supports.

The cases come from the generators inside the onnx package (``onnx.backend.test.case.node``),
which build each one-node model and compute its expected outputs with onnx's reference code.
Generating all of them takes ~15 s, so they are written once to ``tests/.cache`` (per onnx version).

edgesdk needs static, constant parameters, so every input after the first becomes an initializer
holding the test's own value (the numbers computed are the same); the first stays a graph input.
Ops that edgesdk evaluates only on constants (shape arithmetic) get every input as an initializer,
so the whole model folds at import and the folding kernels are checked.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnx.numpy_helper

from edgesdk.onnx_import import supported_operators
from edgesdk.ops import constant_only_ops

CONSTANT_ONLY_OPS = constant_only_ops()
# Cases where onnx's reference and ONNX Runtime (the oracle of tests/ops) disagree: edgesdk computes
# what ONNX Runtime computes, so their expected outputs are ONNX Runtime's.
ORT_DISAGREES = {
    # align_corners over 4 x 0.6 = 2.4 columns: ORT (and torch) divide by the output size 2 - 1,
    # onnx's reference by 2.4 - 1
    "test_resize_downsample_scales_linear_align_corners",
}
# Keyed by the onnx version and the set of ops edgesdk imports (a new op brings its cases in).
_OPS_KEY = hashlib.sha256(",".join(sorted(supported_operators())).encode()).hexdigest()[:12]
CACHE = (Path(os.environ.get("EDGESDK_TEST_CACHE", Path(__file__).parent / ".cache"))
         / f"onnx-node-{onnx.__version__}-{_OPS_KEY}")


@dataclass
class NodeCase:
    name: str
    model: onnx.ModelProto
    feeds: dict[str, np.ndarray]
    expected: list[np.ndarray]


def _generate() -> None:
    from onnx.backend.test.case import node as node_cases
    ops = set(supported_operators())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = node_cases.collect_testcases()
    names = []
    for case in cases:
        model = case.model
        if model is None or len(model.graph.node) != 1:
            continue
        op = model.graph.node[0]
        if op.op_type not in ops or op.domain not in ("", "ai.onnx") or not case.data_sets:
            continue
        inputs, outputs = case.data_sets[0]
        arrays = {f"in_{i}": np.asarray(v) for i, v in enumerate(inputs)}
        arrays.update({f"out_{i}": np.asarray(v) for i, v in enumerate(outputs)})
        if any(a.dtype.kind not in "biuf" for a in arrays.values()):  # no object, bfloat16, float8
            continue
        folder = CACHE / case.name
        folder.mkdir(parents=True, exist_ok=True)
        onnx.save(model, str(folder / "model.onnx"))
        np.savez(folder / "data.npz", **arrays)
        names.append(case.name)
    (CACHE / "index.json").write_text(json.dumps(sorted(names)))


def case_names() -> list[str]:
    index = CACHE / "index.json"
    if not index.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        with open(CACHE.parent / f"{CACHE.name}.lock", "w") as lock:  # one generator at a time
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not index.exists():
                _generate()
    return json.loads(index.read_text())


def load_case(name: str) -> NodeCase:
    folder = CACHE / name
    model = onnx.load(str(folder / "model.onnx"))
    with np.load(folder / "data.npz") as data:
        inputs = [data[f"in_{i}"] for i in range(len(model.graph.input))]
        expected = [data[f"out_{i}"] for i in range(len(model.graph.output))]
    graph = model.graph
    first = graph.input[0].name if graph.input and graph.node[0].op_type not in CONSTANT_ONLY_OPS else None
    for vi, value in zip(graph.input, inputs):
        if vi.name and vi.name != first:
            graph.initializer.append(onnx.numpy_helper.from_array(value, vi.name))
    keep = [vi for vi in graph.input if vi.name == first]
    del graph.input[:]
    graph.input.extend(keep)
    feeds = {first: inputs[0]} if first else {}
    if name in ORT_DISAGREES:
        from conftest import ort_run
        expected = [np.asarray(a) for a in ort_run(model, feeds)]
    return NodeCase(name, model, feeds, expected)
