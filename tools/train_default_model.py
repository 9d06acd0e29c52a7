#!/usr/bin/env python3
"""Train the SDK's embedded default model: a small LeNet-style CNN on scikit-learn's 8x8 digits.

Uses exactly the split of ``edgesdk.datasets.digits_split()`` (seed 0, 20% test, stratified; shipped
as ``edgesdk/data/digits.npz``, written by tools/make_digits_npz.py), so ``edgesdk eval --data digits``
and ``quickstart`` measure on images the model never saw.

Writes (atomically) ``<out-dir>/digits_lenet.onnx`` (opset 17, input ``input`` (N, 1, 8, 8),
output ``logits`` (N, 10), BatchNormalization nodes kept: the SDK folds them itself) and
``<out-dir>/digits_lenet.json`` (metadata, with the test accuracy measured by ONNX Runtime on
the exported file, or by torch when onnxruntime is not installed).

    python tools/train_default_model.py [--out-dir edgesdk/models] [--epochs N] [--seed S]

Needs torch (the ``train`` extra); runs in well under two minutes on two CPU cores.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
import types
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
MODEL_NAME = "digits_lenet"
OPSET = 17
INPUT_NAME = "input"
OUTPUT_NAME = "logits"


def _import_datasets():
    """``edgesdk.datasets``, even when the full package (native extension, ...) can't be imported."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    try:
        import edgesdk.datasets as datasets
    except ImportError:
        for key in [k for k in sys.modules if k == "edgesdk" or k.startswith("edgesdk.")]:
            del sys.modules[key]
        pkg = types.ModuleType("edgesdk")
        pkg.__path__ = [str(ROOT / "edgesdk")]  # bare package: skip edgesdk/__init__.py
        sys.modules["edgesdk"] = pkg
        import edgesdk.datasets as datasets
    return datasets


def build_model():
    import torch.nn as nn

    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1, bias=False),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.MaxPool2d(2),  # 4x4
        nn.Conv2d(16, 32, 3, padding=1, bias=False),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.MaxPool2d(2),  # 2x2
        nn.Flatten(),
        nn.Linear(32 * 2 * 2, 64),
        nn.ReLU(),
        nn.Dropout(0.25),
        nn.Linear(64, 10),
    )


def _shift(x, gen):
    """Random shift of each image by -1, 0 or +1 pixel in each direction (zero fill)."""
    import torch
    import torch.nn.functional as F

    n = x.shape[0]
    padded = F.pad(x, (1, 1, 1, 1))
    dy = torch.randint(0, 3, (n,), generator=gen)
    dx = torch.randint(0, 3, (n,), generator=gen)
    rows = (dy[:, None] + torch.arange(8)[None, :])  # (n, 8)
    cols = (dx[:, None] + torch.arange(8)[None, :])
    idx_n = torch.arange(n)[:, None, None]
    return padded[idx_n, 0, rows[:, :, None], cols[:, None, :]][:, None]


def _accuracy_torch(model, x, y) -> float:
    import torch

    model.eval()
    with torch.no_grad():
        pred = model(torch.from_numpy(x)).argmax(1).numpy()
    return float((pred == y).mean())


def train(epochs: int, seed: int, verbose: bool = True):
    import torch
    import torch.nn as nn

    datasets = _import_datasets()
    train_ds, test_ds = datasets.digits_split()

    torch.manual_seed(seed)
    np.random.seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    gen = torch.Generator().manual_seed(seed)

    model = build_model()
    x_tr = torch.from_numpy(train_ds.x)
    y_tr = torch.from_numpy(train_ds.y)
    batch = 64
    steps_per_epoch = (len(x_tr) + batch - 1) // batch
    opt = torch.optim.Adam(model.parameters(), lr=3e-3, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=3e-3, total_steps=epochs * steps_per_epoch, pct_start=0.2
    )
    loss_fn = nn.CrossEntropyLoss(label_smoothing=0.05)
    tty = verbose and sys.stdout.isatty()
    t0 = time.perf_counter()
    for epoch in range(1, epochs + 1):
        model.train()
        perm = torch.randperm(len(x_tr), generator=gen)
        total, correct, loss_sum = 0, 0, 0.0
        for i in range(0, len(perm), batch):
            idx = perm[i : i + batch]
            xb, yb = _shift(x_tr[idx], gen), y_tr[idx]
            logits = model(xb)
            loss = loss_fn(logits, yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            loss_sum += loss.item() * len(idx)
            correct += int((logits.argmax(1) == yb).sum())
            total += len(idx)
        if verbose and (tty or epoch % 10 == 0 or epoch == epochs):
            test_acc = _accuracy_torch(model, test_ds.x, test_ds.y)
            line = (
                f"epoch {epoch:3d}/{epochs}  loss {loss_sum / total:.4f}  train acc {correct / total:.4f}"
                f"  test acc {test_acc:.4f}  {time.perf_counter() - t0:5.1f}s"
            )
            print(("\r" + line) if tty else line, end="" if tty and epoch < epochs else "\n", flush=True)
    model.eval()
    return model, train_ds, test_ds, time.perf_counter() - t0


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)  # mkstemp makes it 0600
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def export_onnx_bytes(model) -> bytes:
    """TorchScript export with BatchNormalization preserved, dynamic batch axis ``N``."""
    import io

    import onnx
    import torch

    buf = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        # TrainingMode.PRESERVE with an eval-mode model: no Conv+BN fusion, BN exported in
        # inference form (training_mode=0, running statistics).
        torch.onnx.export(
            model, (torch.zeros(1, 1, 8, 8),), buf, dynamo=False, opset_version=OPSET,
            input_names=[INPUT_NAME], output_names=[OUTPUT_NAME],
            dynamic_axes={INPUT_NAME: {0: "N"}, OUTPUT_NAME: {0: "N"}},
            training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=True,
        )
    proto = onnx.load_from_string(buf.getvalue())
    proto.doc_string = "LeNet-style CNN trained on scikit-learn's 8x8 digits (tools/train_default_model.py)"
    onnx.helper.set_model_props(proto, {"edgesdk.name": MODEL_NAME, "edgesdk.preprocess": "pixel/16"})
    onnx.checker.check_model(proto)
    ops = {n.op_type for n in proto.graph.node}
    if "BatchNormalization" not in ops:
        raise RuntimeError(f"exported graph lost its BatchNormalization nodes (ops: {sorted(ops)})")
    return proto.SerializeToString()


def _predict_onnx(data: bytes, x: np.ndarray) -> np.ndarray | None:
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
    return sess.run(None, {INPUT_NAME: x})[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out-dir", type=Path, default=ROOT / "edgesdk" / "models")
    ap.add_argument("--epochs", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--min-accuracy", type=float, default=0.97, help="fail (exit 1) below this test accuracy")
    ap.add_argument("-q", "--quiet", action="store_true")
    args = ap.parse_args(argv)
    if args.epochs < 1:
        ap.error("--epochs must be >= 1")

    import torch

    model, _train_ds, test_ds, train_s = train(args.epochs, args.seed, verbose=not args.quiet)
    with torch.no_grad():
        torch_logits = model(torch.from_numpy(test_ds.x)).numpy()
    torch_acc = float((torch_logits.argmax(1) == test_ds.y).mean())

    data = export_onnx_bytes(model)
    ort_logits = _predict_onnx(data, test_ds.x)
    if ort_logits is not None:
        max_diff = float(np.abs(ort_logits - torch_logits).max())
        acc = float((ort_logits.argmax(1) == test_ds.y).mean())
        if acc != torch_acc or max_diff > 1e-3:
            print(f"error: ONNX Runtime disagrees with torch (acc {acc} vs {torch_acc}, max |diff| {max_diff:.2e})",
                  file=sys.stderr)
            return 1
        measured_by = "onnxruntime"
    else:
        acc, measured_by, max_diff = torch_acc, "torch", None

    if acc < args.min_accuracy:
        print(f"error: test accuracy {acc:.4f} is below --min-accuracy {args.min_accuracy}; nothing written",
              file=sys.stderr)
        return 1
    datasets = sys.modules["edgesdk.datasets"]
    out_dir = args.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    onnx_path = out_dir / f"{MODEL_NAME}.onnx"
    meta = {
        "name": MODEL_NAME,
        "file": onnx_path.name,
        "sha256": hashlib.sha256(data).hexdigest(),
        "dataset": "sklearn digits 8x8",
        "split": {"seed": datasets.DIGITS_SEED, "test_fraction": datasets.DIGITS_TEST_FRACTION, "stratified": True},
        "input": {"name": INPUT_NAME, "shape": ["N", 1, 8, 8], "dtype": "float32", "layout": "NCHW",
                  "preprocess": "pixel/16"},
        "output": {"name": OUTPUT_NAME, "shape": ["N", 10], "dtype": "float32", "meaning": "class logits"},
        "classes": 10,
        "labels": [str(i) for i in range(10)],
        "test_accuracy": round(acc, 6),
        "test_samples": int(len(test_ds)),
        "test_accuracy_measured_by": measured_by,
        "train_seed": args.seed,
        "epochs": args.epochs,
        "torch_version": torch.__version__,
        "onnx_opset": OPSET,
    }
    _atomic_write_bytes(onnx_path, data)
    _atomic_write_bytes(out_dir / f"{MODEL_NAME}.json", (json.dumps(meta, indent=2) + "\n").encode())
    diff = f", max |ORT - torch| {max_diff:.1e}" if max_diff is not None else ""
    print(f"test accuracy {acc:.4f} ({measured_by}, {len(test_ds)} images{diff}); trained in {train_s:.1f}s")
    print(f"wrote {onnx_path} ({len(data)} bytes) and {onnx_path.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
