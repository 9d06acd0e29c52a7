"""``edgesdk quickstart``: the embedded default model end to end.

Inspect it, then measure accuracy on the held-out digits split and latency on every available
backend and precision, with ONNX Runtime as the baseline when it is installed.
"""
from __future__ import annotations

import time
from typing import Callable

import numpy as np

from .backends import available_backends, get_backend
from .datasets import digits_split
from .evaluation import evaluate
from .models import default_model_info, default_model_path, default_recipe_path
from .native import cpu_features
from .profile.latency import measure_latency
from .progress import ProgressFactory
from .runtime.cost import layer_costs
from .runtime.session import Session

Log = Callable[[str], None] | None


def run_quickstart(log: Log = print, progress: ProgressFactory | None = None) -> dict:
    """Run the tour; ``log`` gets its text lines, ``progress(label)`` a callback per evaluation
    (e.g. :func:`edgesdk.progress.transient` for bars). Returns the report ``--json`` prints."""
    say = log or (lambda _msg: None)
    path, info = default_model_path(), default_model_info()
    test = digits_split()[1]
    # The model's batch is dynamic; the tour runs batch 1 on purpose, so it says so itself rather
    # than have every Session note that the dimension was fixed.
    shapes = {info["input"]["name"]: tuple(1 if isinstance(d, str) else d for d in info["input"]["shape"])}
    t0 = time.perf_counter()
    base = Session(path, input_shapes=shapes)
    load_s = time.perf_counter() - t0
    layers = layer_costs(base.graph)
    say(f"edgesdk quickstart: default model {path.name}")
    say(f"  LeNet-5-class CNN trained on {info['dataset']} ({info['classes']} classes), "
        f"exported by torch {info['torch_version']} at opset {info['onnx_opset']}")
    say(f"  loaded in {1e3 * load_s:.1f} ms; {len(layers)} layers after graph passes "
        f"({', '.join(f'{k} {v}' for k, v in base.optimization_stats.items() if v)}), "
        f"{sum(x.params for x in layers):,} params, {sum(x.macs for x in layers):,} MACs")
    cpu = cpu_features()
    say(f"  host CPU: {cpu.vendor} {cpu.model} ({cpu.arch}), native kernel path: {cpu.isa_path()}")
    say(f"  held-out digits test split: {len(test)} images (seed {info['split']['seed']}, "
        f"{int(100 * info['split']['test_fraction'])}%)")
    say("")
    rows = []
    for backend in available_backends():
        for precision in get_backend(backend).precisions:
            sess = Session(path, backend=backend, precision=precision, input_shapes=shapes)
            rows.append(_measure(backend, precision, lambda x, s=sess: s.run({s.input_names[0]: x})
                                 [s.output_names[0]], sess, test, progress))
    baseline = _onnxruntime_row(path, test)
    if baseline:
        rows.append(baseline)
    header = f"  {'backend':<24}{'precision':<11}{'accuracy':>9}{'latency (median)':>19}{'p90':>10}"
    say(header)
    say("  " + "-" * (len(header) - 2))
    for r in rows:
        say(f"  {r['backend']:<24}{r['precision']:<11}{100 * r['accuracy']:>8.2f}%"
            f"{r['latency']['median_ms']:>16.3f} ms{r['latency']['p90_ms']:>7.3f} ms")
    say("")
    say(f"  accuracy recorded at training time ({info['test_accuracy_measured_by']}): "
        f"{100 * info['test_accuracy']:.2f}%")
    packed = _compression_step(path, test, progress, shapes)
    say("")
    say(f"  compression with {default_recipe_path().name} (no fine-tuning; `edgesdk finetune` goes further):")
    say(f"    {path.name} {packed['source_bytes']:,} B -> .edgepkg {packed['package_bytes']:,} B "
        f"({packed['ratio']:.1f}x smaller), accuracy {100 * packed['accuracy']:.2f}% "
        f"({100 * (packed['accuracy'] - packed['baseline_accuracy']):+.2f} pp), opened in "
        f"{packed['open_ms']:.1f} ms")
    return {"model": str(path), "model_info": info, "compression": packed,
            "cpu": {"arch": cpu.arch, "vendor": cpu.vendor, "model": cpu.model, "isa_path": cpu.isa_path(),
                    "flags": dict(cpu.flags)}, "load_ms": 1e3 * load_s,
            "passes": base.optimization_stats, "params": sum(x.params for x in layers),
            "macs": sum(x.macs for x in layers), "results": rows}


def _measure(backend: str, precision: str, infer: Callable[[np.ndarray], np.ndarray], sess, test,
             progress: ProgressFactory | None) -> dict:
    bar = progress(f"evaluating {backend} {precision}") if progress is not None else None
    result = evaluate(sess, test, progress=(lambda done, total: bar(done, total, "")) if bar else None)
    sample = np.ascontiguousarray(test.x[:1])
    latency = measure_latency(lambda: infer(sample), min_time_s=0.3)
    return {"backend": backend, "precision": precision, "accuracy": result.accuracy,
            "latency": latency.to_dict()}


def _onnxruntime_row(path, test) -> dict | None:
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    ort_sess = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    name = ort_sess.get_inputs()[0].name
    scores = np.concatenate([ort_sess.run(None, {name: test.x[i:i + 1]})[0] for i in range(len(test))])
    sample = np.ascontiguousarray(test.x[:1])
    latency = measure_latency(lambda: ort_sess.run(None, {name: sample}), min_time_s=0.3)
    return {"backend": "onnxruntime (baseline)", "precision": "fp32",
            "accuracy": float((scores.argmax(1) == test.y).mean()), "latency": latency.to_dict()}


def _compression_step(path, test, progress: ProgressFactory | None, shapes: dict) -> dict:
    """Pack the default model with its tuned recipe into a temp dir, reopen it, measure it."""
    import tempfile
    from pathlib import Path

    from .compress.recipe import Recipe
    from .pack import pack_model
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "digits_lenet.edgepkg"
        result = pack_model(path, out, Recipe.load(default_recipe_path()), data=test, input_shapes=shapes,
                            progress=progress("packing") if progress is not None else None)
        t0 = time.perf_counter()
        sess = Session(out)
        open_ms = 1e3 * (time.perf_counter() - t0)
        reopened = evaluate(sess, test).accuracy
    report = result.to_dict()
    report.update(open_ms=open_ms, accuracy_after_reload=reopened)
    return report
