"""Cached, quiet ONNX export of the zoo models.

Files go to ``tests/.cache/onnx/`` (override the ``tests/.cache`` part with ``EDGESDK_TEST_CACHE``).
The file name carries a hash of everything that determines the export (the zoo's source files,
model name, input shape, exporter, opset, flags, torch/onnx versions), so a stale file is never
reused. Exports are written to a temporary name and ``os.replace``-d into place, so parallel
pytest workers racing on the same model are harmless.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Sequence

import numpy as np

from . import models as _models

EXPORTERS = ("torchscript", "dynamo")
DEFAULT_OPSET = {"torchscript": 17, "dynamo": 18}
_HERE = Path(__file__).resolve().parent
_SOURCES = (_HERE / "models.py", _HERE / "export.py")


def cache_dir() -> Path:
    """``$EDGESDK_TEST_CACHE/onnx`` or ``tests/.cache/onnx``."""
    root = os.environ.get("EDGESDK_TEST_CACHE")
    base = Path(root) if root else _HERE.parent / ".cache"
    return base / "onnx"


def _resolve_shape(name: str, input_shape: Sequence[int] | None) -> tuple[int, ...]:
    spec = _models.get_spec(name)
    shape = tuple(int(d) for d in (input_shape if input_shape is not None else spec.correctness_shape))
    if len(shape) != 4 or min(shape) < 1:
        raise ValueError(f"{name}: input shape must be 4-D NCHW with positive dims, got {shape}")
    return shape


def sample_input(name: str, input_shape: Sequence[int] | None = None, seed: int = 0) -> np.ndarray:
    """Deterministic float32 standard-normal input (default: the model's correctness shape)."""
    shape = _resolve_shape(name, input_shape)
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def output_names(name: str) -> list[str]:
    n = _models.get_spec(name).num_outputs
    return ["output"] if n == 1 else [f"output_{i}" for i in range(n)]


def torch_outputs(name: str, x: np.ndarray) -> list[np.ndarray]:
    """Reference outputs from the eval-mode torch model."""
    import torch

    model = _models.build(name)
    with torch.no_grad():
        out = model(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)))
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [o.detach().cpu().numpy() for o in outs]


def _cache_key(name, shape, exporter, opset, keep_batchnorm, dynamic_batch, constant_folding) -> str:
    import onnx
    import torch

    h = hashlib.sha256()
    for src in _SOURCES:
        h.update(src.read_bytes())
    versions = [torch.__version__, onnx.__version__]
    if exporter == "dynamo":
        import onnxscript

        versions.append(onnxscript.__version__)
    h.update(
        repr((name, shape, exporter, opset, keep_batchnorm, dynamic_batch, constant_folding, versions)).encode()
    )
    return h.hexdigest()[:16]


def _quiet():
    """Silence the exporters' warnings, prints and log records; keep the text for error messages."""
    from edgesdk.compress.torch_bridge import quiet_export
    return quiet_export()


def _onnx_opset(path) -> int | None:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)


def _lrn_torchscript_symbolic(g, x, size, alpha, beta, k):
    from torch.onnx import symbolic_helper as sh

    out = g.op(
        "LRN", x, size_i=sh._get_const(size, "i", "size"), alpha_f=sh._get_const(alpha, "f", "alpha"),
        beta_f=sh._get_const(beta, "f", "beta"), bias_f=sh._get_const(k, "f", "k"),
    )
    out.setType(x.type())
    return out


_registered_torchscript = False


def _register_torchscript_symbolics() -> None:
    global _registered_torchscript
    if not _registered_torchscript:
        import torch

        torch.onnx.register_custom_op_symbolic("edgesdk_zoo::lrn", _lrn_torchscript_symbolic, 1)
        _registered_torchscript = True


def _dynamo_translations() -> dict:
    import torch
    from onnxscript import opset18 as op

    def lrn(x, size: int, alpha: float, beta: float, k: float):
        return op.LRN(x, size=size, alpha=alpha, beta=beta, bias=k)

    return {torch.ops.edgesdk_zoo.lrn.default: lrn}


def _export_torchscript(model, x, path, opset, names_out, keep_batchnorm, dynamic_batch, constant_folding):
    import torch

    _register_torchscript_symbolics()
    kwargs = {}
    if dynamic_batch:
        kwargs["dynamic_axes"] = {n: {0: "N"} for n in ["input", *names_out]}
    # TrainingMode.PRESERVE with the model in eval mode skips the eval-mode Conv+BN fusion pass,
    # so BatchNormalization nodes (training_mode=0, running statistics) stay in the graph.
    training = torch.onnx.TrainingMode.PRESERVE if keep_batchnorm else torch.onnx.TrainingMode.EVAL
    torch.onnx.export(
        model, (x,), str(path), dynamo=False, opset_version=opset, input_names=["input"],
        output_names=names_out, training=training, do_constant_folding=constant_folding, **kwargs,
    )


def _optimize_keeping_batchnorm(ir_model) -> None:
    """onnxscript's default optimisation (what ``optimize=True`` runs) minus the BN-fusion rules."""
    import onnx_ir as ir
    import onnx_ir.passes.common as common_passes
    from onnxscript import rewriter
    from onnxscript.optimizer import _constant_folding
    from onnxscript.rewriter.rules.common import _fuse_batchnorm

    fuse_bn = set(_fuse_batchnorm.rules)
    rules = [r for r in rewriter._DEFAULT_REWRITE_RULES if r not in fuse_bn]
    ir.passes.Sequential(
        common_passes.InlinePass(),
        ir.passes.PassManager(
            [
                _constant_folding.FoldConstantsPass(
                    shape_inference=True,
                    input_size_limit=_constant_folding.DEFAULT_CONSTANT_FOLD_INPUT_SIZE_LIMIT,
                    output_size_limit=_constant_folding.DEFAULT_CONSTANT_FOLD_OUTPUT_SIZE_LIMIT,
                ),
                rewriter.RewritePass(rules),
                common_passes.RemoveUnusedNodesPass(),
                common_passes.RemoveUnusedFunctionsPass(),
                common_passes.RemoveUnusedOpsetsPass(),
            ],
            steps=2,
            early_stop=True,
        ),
        common_passes.RemoveUnusedNodesPass(),
        common_passes.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0),
        common_passes.DeduplicateInitializersPass(),
        common_passes.CommonSubexpressionEliminationPass(),
        common_passes.NameFixPass(),
    )(ir_model)


def _export_dynamo(model, x, path, opset, names_out, keep_batchnorm, dynamic_batch, constant_folding):
    import torch

    kwargs = {}
    if dynamic_batch:
        kwargs["dynamic_shapes"] = ({0: torch.export.Dim("N", min=1, max=1024)},)
        if x.shape[0] == 1:  # torch.export specialises size-1 dims: trace with batch 2
            x = torch.cat([x, x], 0)
    # The default optimisation (onnxscript rewriter) fuses Conv+BatchNormalization; with
    # keep_batchnorm the same optimisation runs without the BN-fusion rules.
    optimize = constant_folding and not keep_batchnorm
    prog = torch.onnx.export(
        model, (x,), dynamo=True, opset_version=opset, input_names=["input"], output_names=names_out,
        external_data=False, optimize=optimize, verbose=False,
        custom_translation_table=_dynamo_translations(), **kwargs,
    )
    if constant_folding and keep_batchnorm:
        _optimize_keeping_batchnorm(prog.model)
    prog.save(str(path), external_data=False)


def export_onnx(
    name: str,
    *,
    input_shape: Sequence[int] | None = None,
    exporter: str = "torchscript",
    opset: int | None = None,
    keep_batchnorm: bool = False,
    dynamic_batch: bool = False,
    constant_folding: bool = True,
) -> Path:
    """Export zoo model ``name`` to ONNX (cached) and return the file's path.

    ``input_shape`` defaults to the model's correctness shape. ``exporter`` is ``"torchscript"``
    (``torch.onnx.export(dynamo=False)``) or ``"dynamo"`` (needs the ``onnxscript`` package).
    ``opset`` defaults to 17 for torchscript and 18 for dynamo: the dynamo exporter builds opset-18
    graphs and its down-conversion fails for several ops (Pad, ReduceMean, ...), in which case it
    silently keeps opset 18, so a dynamo export whose file is not at the requested opset raises.
    ``keep_batchnorm`` keeps BatchNormalization nodes (inference form, ``training_mode=0``);
    otherwise the exporter folds BN into the preceding Conv (torchscript: its eval-mode Conv+BN
    fusion; dynamo: onnxscript's fuse-batchnorm rewrite). torchscript keeps BN through
    ``training=TrainingMode.PRESERVE`` on the eval-mode model; dynamo runs its usual optimisation
    minus the BN-fusion rules. ``dynamic_batch`` makes axis 0 of the input and outputs symbolic
    ("N"). ``constant_folding=False`` turns off the exporter's constant folding / graph
    optimisation (keeps e.g. the Shape->Gather->Unsqueeze->Concat->Reshape chains); note that with
    torchscript this also skips Conv+BN fusion, so BN nodes stay whatever ``keep_batchnorm`` says.
    The input is named ``input``; outputs ``output`` (or ``output_0``, ``output_1``, ...).
    """
    if exporter not in EXPORTERS:
        raise ValueError(f"exporter must be one of {EXPORTERS}, got {exporter!r}")
    if opset is None:
        opset = DEFAULT_OPSET[exporter]
    shape = _resolve_shape(name, input_shape)
    key = _cache_key(name, shape, exporter, int(opset), bool(keep_batchnorm), bool(dynamic_batch), bool(constant_folding))
    out_dir = cache_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    dims = "x".join(map(str, shape))
    path = out_dir / f"{name}-{dims}-{exporter}-op{opset}-{key}.onnx"
    if path.exists():
        return path

    import torch

    model = _models.build(name)
    x = torch.from_numpy(sample_input(name, shape))
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp.onnx", dir=out_dir)
    os.close(fd)
    try:
        fn = _export_torchscript if exporter == "torchscript" else _export_dynamo
        with _quiet() as log, torch.no_grad():
            try:
                fn(model, x, tmp, int(opset), output_names(name), keep_batchnorm, dynamic_batch, constant_folding)
            except Exception as exc:
                text = log.getvalue().strip()
                if text:
                    exc.add_note(f"exporter output:\n{text[-4000:]}")
                raise
        got = _onnx_opset(tmp)
        if got != int(opset):
            raise RuntimeError(
                f"{name}: the {exporter} exporter produced opset {got}, not the requested {opset}"
                + (" (the dynamo exporter cannot down-convert this graph; use opset=18)" if exporter == "dynamo" else "")
            )
        os.chmod(tmp, 0o644)  # mkstemp makes it 0600
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return path
