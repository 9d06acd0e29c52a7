"""The ``edgesdk`` command line (also ``python -m edgesdk``).

Every command takes ``--json`` for machine-readable output, ``-q`` (errors and results only: no
progress bars, notes or warnings) and ``-v`` (also what was chosen: backend, device; ``-vv`` debug
logs). Errors print one line and exit 2; ``--debug`` shows the traceback instead. Progress bars
are drawn on stderr only when it is a terminal.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from . import __version__
from .errors import EdgeSDKError, InputError
from .fileio import atomic_path

EXIT_USAGE = 2
_log = logging.getLogger("edgesdk.cli")


# -- output levels ---------------------------------------------------------------------------
class _LevelFormatter(logging.Formatter):
    """``edgesdk: warning: ...`` for warnings (what a user may want to act on), ``edgesdk: ...``
    for info and debug lines (what -v shows)."""

    def format(self, record: logging.LogRecord) -> str:
        prefix = {logging.WARNING: "warning: ", logging.ERROR: "error: ", logging.CRITICAL: "error: "}
        return f"edgesdk: {prefix.get(record.levelno, '')}{record.getMessage()}"


def _log_level(args: argparse.Namespace) -> int:
    if args.quiet:
        return logging.ERROR
    return {0: logging.WARNING, 1: logging.INFO}.get(args.verbose, logging.DEBUG)


def _configure_output(args: argparse.Namespace) -> Callable[[], None]:
    """Log the ``edgesdk`` loggers to stderr at the level -q/-v ask for, and turn progress bars off
    under -q and --json. Returns the undo: main() called in-process (tests, scripts) leaves the
    process's logging and bars as it found them."""
    from . import progress
    logger = logging.getLogger("edgesdk")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_LevelFormatter())
    level, bars = logger.level, progress.bars_allowed()
    logger.addHandler(handler)
    logger.setLevel(_log_level(args))
    progress.set_enabled(bars and not (args.quiet or getattr(args, "json", False)))

    def restore() -> None:
        logger.removeHandler(handler)
        logger.setLevel(level)
        progress.set_enabled(bars)
    return restore


def _notes(args: argparse.Namespace) -> Callable[[str], None] | None:
    """Where running commentary (fine-tuning epochs, quickstart steps) goes: stdout, stderr under
    --json (stdout holds the JSON), nowhere under -q."""
    if args.quiet:
        return None
    if getattr(args, "json", False):
        return lambda line: print(line, file=sys.stderr)
    return print


def _bars() -> Callable[[str], Callable[[int, int, str], None]] | None:
    """A progress factory for a library call (bars erased when done), or None when none may show."""
    from .progress import bars_enabled, transient
    return transient if bars_enabled() else None


def _positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (a usage error, exit 2, otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _percentage_points(text: str) -> float:
    """argparse type: accuracy points in [0, 100] (1.5 means 1.5 percentage points)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected percentage points such as 1.0, got {text!r}") from None
    if not 0 <= value <= 100:
        raise argparse.ArgumentTypeError(f"expected percentage points in [0, 100], got {text}")
    return value


# -- small helpers ---------------------------------------------------------------------------
def _parse_input_shapes(specs: Sequence[str] | None) -> dict[str, tuple[int, ...]] | None:
    """``NAME=1x3x224x224`` -> {NAME: (1, 3, 224, 224)}."""
    if not specs:
        return None
    shapes = {}
    for spec in specs:
        name, sep, dims = spec.rpartition("=")
        try:
            shape = tuple(int(d) for d in dims.lower().split("x"))
        except ValueError:
            shape = ()
        if not sep or not name or not shape or min(shape) <= 0:
            raise InputError(f"--input-shape {spec!r}: expected NAME=DxDx... e.g. input=1x3x224x224")
        shapes[name] = shape
    return shapes


def _atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Write through a temp file in the same folder, then rename: no half-written outputs."""
    with atomic_path(path) as tmp:
        write(tmp)


def _emit_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, default=_json_default))


def _json_default(value: Any) -> Any:
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)


def _format_count(n: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.2f}{unit}"
    return str(int(n))


def _table(rows: list[list[str]], header: list[str], right: set[int] = frozenset()) -> str:
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    def line(r):
        return "  ".join(str(c).rjust(w) if i in right else str(c).ljust(w)
                         for i, (c, w) in enumerate(zip(r, widths))).rstrip()
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def _session(args: argparse.Namespace, model: Any = None, **overrides: Any):
    from .runtime.session import Session
    options = dict(backend=getattr(args, "backend", "auto"),
                   precision=getattr(args, "precision", "fp32"),
                   threads=getattr(args, "threads", None),
                   input_shapes=_parse_input_shapes(getattr(args, "input_shape", None)),
                   optimize=not getattr(args, "no_optimize", False))
    options.update(overrides)
    session = Session(model if model is not None else args.model, **options)
    device = getattr(session._impl, "device_label", None)  # cpu backend: CPU model, kernel path, threads
    _log.info("backend %s%s, precision %s (asked for %s)", session.backend, f" on {device}" if device else "",
              session.precision, options["backend"])
    return session


# -- inspect ---------------------------------------------------------------------------------
def cmd_inspect(args: argparse.Namespace) -> int:
    from .runtime.cost import layer_costs
    sess = _session(args)
    graph = sess.graph
    layers = layer_costs(graph)
    weight_bytes = sum(t.nbytes for t in graph.constants())
    summary = {
        "model": str(args.model), "graph": graph.name, "metadata": graph.metadata,
        "inputs": {k: list(v) for k, v in sess.input_shapes.items()},
        "outputs": {k: list(v) for k, v in sess.output_shapes.items()},
        "passes": sess.optimization_stats,
        "layers": [layer.to_dict() for layer in layers],
        "totals": {"layers": len(layers), "params": sum(x.params for x in layers),
                   "macs": sum(x.macs for x in layers), "weight_bytes": weight_bytes,
                   "stored_bytes": sum(t.stored_nbytes for t in graph.constants()),
                   "peak_activation_bytes": sess.plan.peak_activation_bytes},
    }
    if args.json:
        _emit_json(summary)
        return 0
    for x, node in zip(summary["layers"], graph.nodes):
        x["weights"] = _weight_encoding(graph, node)
        x["stored_bytes"] = _stored_bytes(graph, node)
    errors = _layer_errors(graph)
    for x in summary["layers"]:
        if x["name"] in errors:
            x["error_rms"] = errors[x["name"]]
    rows = [[str(i), x.name, x.op, "x".join(map(str, x.output_shape)), _format_count(x.params),
             _format_count(x.macs), _weight_encoding(graph, node), _format_bytes(_stored_bytes(graph, node)),
             f"{errors[x.name]:.3f}" if x.name in errors else ""]
            for i, (x, node) in enumerate(zip(layers, graph.nodes))]
    print(f"{args.model}: graph {graph.name!r}, opset {graph.metadata.get('opset')}, "
          f"producer {graph.metadata.get('producer') or 'unknown'}")
    print("inputs:  " + ", ".join(f"{k} {'x'.join(map(str, v))}" for k, v in sess.input_shapes.items()))
    print("outputs: " + ", ".join(f"{k} {'x'.join(map(str, v))}" for k, v in sess.output_shapes.items()))
    for fixed in graph.metadata.get("fixed_dimensions") or ():
        print(_fixed_dimension_line(fixed, sess.input_shapes))
    if sess.optimization_stats:
        print("passes:  " + ", ".join(f"{k} {v}" for k, v in sess.optimization_stats.items()))
    print()
    package = graph.metadata.get("package")
    if package:
        _print_package_metadata(package, graph.metadata)
    print(_table(rows, ["#", "name", "op", "output", "params", "MACs", "weights", "stored", "rms err"],
                 right={0, 4, 5, 7, 8}))
    t = summary["totals"]
    print(f"\ntotal: {t['layers']} layers, {_format_count(t['params'])} params "
          f"({_format_bytes(t['stored_bytes'])} stored, {_format_bytes(weight_bytes)} as dense fp32), "
          f"{_format_count(t['macs'])} MACs, peak activations {t['peak_activation_bytes'] / 1024:.1f} KiB")
    return 0


def _fixed_dimension_line(fixed: dict, input_shapes: dict) -> str:
    """One inspect line for a dynamic input dimension that import fixed (batch -> 1)."""
    name, axis = fixed.get("input"), fixed.get("axis", 0)
    symbol = f" ({fixed['dim_param']})" if fixed.get("dim_param") else ""
    example = list(input_shapes.get(name, ()))
    if isinstance(axis, int) and 0 <= axis < len(example):
        example[axis] = 4
    return (f"fixed:   input {name!r} dimension {axis}{symbol} is dynamic in the model and runs as {fixed.get('size')} "
            f"(choose another size: --input-shape {name}={'x'.join(map(str, example))})")


def _layer_errors(graph) -> dict[str, float]:
    """Layer name -> relative RMS weight error of its compression, from the package's stats."""
    layers = (graph.metadata.get("compression") or {}).get("layers") or []
    return {r["name"]: r["error_rms"] for r in layers
            if isinstance(r, dict) and isinstance(r.get("name"), str) and isinstance(r.get("error_rms"), (int, float))}


def _weight_encoding(graph, node) -> str:
    weight = graph.tensors.get(node.inputs[1]) if node.op in ("Conv", "Gemm") and len(node.inputs) > 1 else None
    if weight is None or not weight.is_constant:
        return ""
    return weight.encoding.describe() if weight.encoding is not None else str(weight.dtype).replace("float", "fp")


def _stored_bytes(graph, node) -> int:
    return sum(graph.tensors[i].stored_nbytes for i in node.inputs if i and graph.tensors[i].is_constant)


def _format_bytes(n: int) -> str:
    return f"{n / 1024:.1f} KiB" if n >= 1024 else f"{n} B"


def _print_package_metadata(meta: dict, graph_metadata: dict) -> None:
    compression = graph_metadata.get("compression") or {}
    print(f"package: format {meta.get('format_version')}, {meta.get('file_size', 0):,} bytes, "
          f"{meta.get('producer', '?')}")
    print(f"source:  {graph_metadata.get('source', '?')} (sha256 {str(meta.get('source_sha256') or '')[:16]}...)")
    if meta.get("recipe"):
        print(f"recipe:  {json.dumps(meta['recipe'], sort_keys=True)}")
    if meta.get("accuracy") is not None:
        baseline = compression.get("baseline_accuracy")
        print(f"accuracy on {meta.get('accuracy_dataset')}: {100 * meta['accuracy']:.2f}%"
              + (f" (uncompressed {100 * baseline:.2f}%)" if baseline is not None else ""))
    print()


# -- run -------------------------------------------------------------------------------------
def load_feeds(args: argparse.Namespace, sess) -> dict[str, np.ndarray]:
    if args.random:
        rng = np.random.default_rng(args.seed)
        return {n: rng.standard_normal(s).astype(np.float32) for n, s in sess.input_shapes.items()}
    path = Path(args.input)
    if not path.is_file():
        raise InputError(f"input file {args.input!r} not found")
    try:
        loaded = np.load(path, allow_pickle=False)
    except Exception as exc:
        raise InputError(f"{args.input}: not a readable .npy/.npz file ({exc})") from None
    if isinstance(loaded, np.ndarray):
        if len(sess.input_names) != 1:
            raise InputError(f"the model has inputs {sess.input_names}: pass an .npz with one array per input")
        feeds = {sess.input_names[0]: loaded}
    else:
        with loaded:
            feeds = {k: loaded[k] for k in loaded.files}
    # Float inputs saved as float64 (numpy's default) are cast; anything else must already match.
    return {k: v.astype(np.float32) if v.dtype.kind == "f" else v for k, v in feeds.items()}


def cmd_run(args: argparse.Namespace) -> int:
    sess = _session(args)
    outputs = sess.run(load_feeds(args, sess))
    if args.output:
        out = Path(args.output)
        _atomic_write(out, lambda tmp: _save_npz(tmp, outputs))
    report = {"model": str(args.model), "backend": sess.backend, "precision": sess.precision,
              "outputs": {k: _describe(v) for k, v in outputs.items()}, "saved_to": args.output}
    if args.json:
        _emit_json(report)
        return 0
    print(f"backend {sess.backend}, precision {sess.precision}")
    for name, info in report["outputs"].items():
        print(f"{name}: shape {info['shape']} {info['dtype']}  min {info['min']:.6g}  max {info['max']:.6g}"
              f"  mean {info['mean']:.6g}")
        if "top5" in info:
            print("  top-5: " + ", ".join(f"{c} ({s:.4g})" for c, s in info["top5"]))
    if args.output:
        print(f"saved outputs to {args.output}")
    return 0


def _save_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    with open(path, "wb") as f:  # a file object stops numpy from appending ".npz" to the temp name
        np.savez(f, **arrays)


def _describe(value: np.ndarray) -> dict:
    info = {"shape": list(value.shape), "dtype": str(value.dtype),
            "min": float(value.min()) if value.size else 0.0,
            "max": float(value.max()) if value.size else 0.0,
            "mean": float(value.mean()) if value.size else 0.0}
    if value.ndim == 2 and value.shape[0] == 1 and value.shape[1] > 1:
        order = np.argsort(-value[0])[:5]
        info["top5"] = [[int(i), float(value[0, i])] for i in order]
    return info


# -- eval ------------------------------------------------------------------------------------
def cmd_eval(args: argparse.Namespace) -> int:
    from .datasets import load_dataset
    from .evaluation import evaluate
    from .progress import Progress
    data = load_dataset(args.data)
    sess = _session(args)
    bar = Progress("evaluating", leave=False)
    result = evaluate(sess, data, limit=args.limit, progress=lambda done, total: bar(done, total, ""))
    report = {"model": str(args.model), "backend": sess.backend, "precision": sess.precision,
              **result.to_dict()}
    if args.json:
        _emit_json(report)
        return 0
    print(f"{args.model} on {result.dataset} ({result.samples} samples), backend {sess.backend} "
          f"{sess.precision}")
    print(f"top-1 accuracy: {100 * result.accuracy:.2f}% ({result.correct}/{result.samples})")
    print(f"latency per batch of {result.batch}: {result.latency}")
    return 0


# -- pack ------------------------------------------------------------------------------------
def _recipe_from_args(args: argparse.Namespace, base=None):
    import dataclasses

    from .compress.recipe import LayerSettings, Recipe
    recipe = Recipe.load(args.recipe) if args.recipe else base if base is not None else Recipe()
    flags = {"prune": args.prune, "cluster_bits": args.cluster_bits, "per_channel": args.per_channel or None,
             "init": args.init, "nnm_rate": args.nnm_rate, "nnm_mode": args.nnm_mode, "fp16": args.fp16 or None}
    overrides = {k: v for k, v in flags.items() if v is not None}
    default = LayerSettings(**{**dataclasses.asdict(recipe.default), **overrides})
    global_prune = args.global_prune if args.global_prune is not None else recipe.global_prune
    return dataclasses.replace(recipe, default=default, global_prune=global_prune)


def cmd_pack(args: argparse.Namespace) -> int:
    from .datasets import load_dataset
    from .pack import AccuracyDropError, pack_model
    from .progress import Progress
    if args.max_drop is not None and not args.eval:
        raise InputError("--max-drop needs --eval DATA: the accuracy drop is measured on that dataset")
    _check_output_folder(args.output)
    recipe = _recipe_from_args(args)
    data = load_dataset(args.eval) if args.eval else None
    shapes, bar = _parse_input_shapes(args.input_shape), Progress("packing", leave=False)
    try:
        result = pack_model(args.model, args.output, recipe, data=data, input_shapes=shapes, progress=bar,
                            max_drop=args.max_drop, unmatched="error" if args.strict_recipe else "warn")
    except AccuracyDropError as exc:
        raise exc.with_hint("try a gentler recipe (lower --prune, higher --cluster-bits), `edgesdk finetune` "
                            "with the same recipe, or a larger --max-drop") from None
    if args.json:
        _emit_json(result.to_dict())
        return 0
    rows = [[str(i), r.name, r.op, r.encoding, _format_count(r.params), _format_bytes(r.bytes_before),
             _format_bytes(r.bytes_after), f"{r.ratio:.1f}x", f"{r.error_rms:.3f}"]
            for i, r in enumerate(result.layers)]
    print(_table(rows, ["#", "layer", "op", "encoding", "params", "fp32", "stored", "ratio", "rel.err"],
                 right={0, 4, 5, 6, 7, 8}))
    before = sum(r.bytes_before for r in result.layers)
    after = sum(r.bytes_after for r in result.layers)
    print(f"\nweights: {_format_bytes(before)} -> {_format_bytes(after)} ({before / max(1, after):.1f}x)")
    print(f"file:    {args.model} {_format_bytes(result.source_bytes)} -> {args.output} "
          f"{_format_bytes(result.package_bytes)} ({result.ratio:.1f}x smaller)")
    if result.accuracy is not None:
        print(f"accuracy on {result.dataset}: {100 * result.accuracy:.2f}% "
              f"(uncompressed {100 * result.baseline_accuracy:.2f}%, "
              f"{100 * (result.accuracy - result.baseline_accuracy):+.2f} pp)")
    return 0


# -- export ----------------------------------------------------------------------------------
def cmd_export(args: argparse.Namespace) -> int:
    from .export import export_onnx
    path = export_onnx(args.model, args.output, input_shapes=_parse_input_shapes(args.input_shape))
    report = {"model": str(args.model), "output": str(path), "bytes": path.stat().st_size}
    if args.json:
        _emit_json(report)
        return 0
    print(f"wrote {path} ({_format_bytes(report['bytes'])}): ONNX with float32 weights from {args.model}")
    return 0


# -- finetune --------------------------------------------------------------------------------
def cmd_finetune(args: argparse.Namespace) -> int:
    from .pack import AccuracyDropError, compress_model, pack_model
    from .progress import Progress

    model, recipe, train, test = _finetune_inputs(args)
    finetuned = _finetune(model, recipe, train, test, args)
    graph, _ = compress_model(finetuned, recipe, unmatched="ignore")  # reported before training
    try:
        result = pack_model(model, args.output, recipe, data=test, graph=graph,
                            input_shapes=_parse_input_shapes(args.input_shape), max_drop=args.max_drop,
                            progress=Progress("packing", leave=False))
    except AccuracyDropError as exc:
        raise exc.with_hint("try more --epochs, a gentler recipe (lower --prune, higher --cluster-bits) "
                            "or a larger --max-drop") from None
    report = result.to_dict()
    if args.json:
        _emit_json(report)
        return 0
    print(f"packed {args.output}: {_format_bytes(result.package_bytes)}, {result.ratio:.1f}x smaller than "
          f"{Path(model).name} ({_format_bytes(result.source_bytes)})")
    if result.accuracy is not None:
        print(f"accuracy on {result.dataset}: {100 * result.accuracy:.2f}% (uncompressed "
              f"{100 * result.baseline_accuracy:.2f}%, {100 * (result.accuracy - result.baseline_accuracy):+.2f} pp)")
    return 0


def _finetune_inputs(args: argparse.Namespace) -> tuple[str, Any, Any, Any]:
    """Everything fine-tuning needs, checked before training starts (it takes minutes): the model
    path, the recipe, the datasets, --max-drop's dataset and the output folder."""
    from .datasets import digits_split, load_dataset
    from .models import default_model_path
    model = args.model or str(default_model_path())
    if args.max_drop is not None and args.train != "digits" and not args.test:
        raise InputError("--max-drop needs a test dataset: pass --test DATA (with --train digits the digits "
                         "test split is used)")
    if args.beta is not None and not 0 < args.beta <= 1:
        raise InputError(f"--beta must be in (0, 1], got {args.beta}")
    _check_output_folder(args.output)
    builtin = _builtin_recipe(args.recipe)
    if builtin is not None:
        args.recipe = None
    recipe = _recipe_from_args(args, builtin)
    train, test = digits_split() if args.train == "digits" else (load_dataset(args.train), None)
    if args.test:
        test = load_dataset(args.test)
    return model, recipe, train, test


def _check_output_folder(output: str) -> None:
    """-o into a folder that does not exist fails now, not after the work."""
    folder = Path(output).resolve().parent
    if not folder.is_dir():
        raise InputError(f"-o {output}: folder {str(folder)!r} does not exist")


def _builtin_recipe(name: str | None):
    """A recipe of edgesdk.compress.finetune.DIGITS_RECIPES named by --recipe (when no such file)."""
    if not name or Path(name).exists():
        return None
    from .compress.finetune import DIGITS_RECIPES
    from .compress.recipe import Recipe
    return Recipe.from_dict(DIGITS_RECIPES[name]) if name in DIGITS_RECIPES else None


def _finetune(model: str, recipe, train, test, args: argparse.Namespace):
    from .compress.finetune import finetune_graph
    from .loader import load_model
    from .passes import optimize
    graph = load_model(model, _parse_input_shapes(args.input_shape))
    optimize(graph)
    options = {k: v for k, v in {"epochs": args.epochs, "lr": args.lr, "beta": args.beta,
                                 "batch_size": args.batch_size, "prune_ramp": args.prune_ramp}.items()
               if v is not None}
    return finetune_graph(graph, recipe, train, test=test, log=_notes(args), progress=_bars(),
                          unmatched="error" if args.strict_recipe else "warn", **options)


# -- quickstart ------------------------------------------------------------------------------
def cmd_quickstart(args: argparse.Namespace) -> int:
    from .quickstart import run_quickstart
    report = run_quickstart(log=None if args.json else print, progress=_bars())
    if args.json:
        _emit_json(report)
    return 0


# -- devices ---------------------------------------------------------------------------------
def cmd_devices(args: argparse.Namespace) -> int:
    from . import native
    from .backends.cpu import physical_cores
    features = native.cpu_features()
    cpu = {"arch": features.arch, "vendor": features.vendor, "model": features.model,
           "features": sorted(name for name, present in features.flags.items() if present),
           "isa_path": native.active_isa(), "supported_isas": native.supported_isas(),
           "physical_cores": physical_cores()}
    try:
        from .backends.opencl import describe_devices
        opencl, opencl_note = describe_devices(), None
    except (ImportError, EdgeSDKError) as exc:
        opencl, opencl_note = [], f"no OpenCL device listed: {exc}"
    if args.json:
        _emit_json({"cpu": cpu, "opencl": opencl, "opencl_note": opencl_note})
        return 0
    print(f"cpu: {cpu['vendor']} {cpu['model']} ({cpu['arch']}), {cpu['physical_cores']} physical cores")
    print(f"  features: {' '.join(cpu['features']) or '(none)'}")
    print(f"  cpu backend kernels: {cpu['isa_path']} (this CPU runs: {', '.join(cpu['supported_isas'])}; "
          "EDGESDK_CPU_ISA forces one)")
    if opencl_note:
        print(opencl_note)
    for device in opencl:
        summary = ", ".join(f"{key} {device[key]}" for key in ("type", "opencl_version", "compute_units")
                            if key in device)
        print(f"opencl [{device.get('index')}]: {device.get('device', '?')} ({summary})")
    return 0


# -- parser ----------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    from .backends import backend_choices
    from .runtime.precision import PRECISIONS

    common = argparse.ArgumentParser(add_help=False, parents=[_verbosity_options(top_level=False)])
    common.add_argument("--json", action="store_true", help="machine-readable output")
    common.add_argument("--debug", action="store_true", help="show tracebacks on errors")

    model_opts = argparse.ArgumentParser(add_help=False)
    model_opts.add_argument("model", help="model file (.onnx or .edgepkg)")
    model_opts.add_argument("--input-shape", action="append", metavar="NAME=DxD...",
                            help="fix a dynamic input shape, e.g. input=1x3x224x224 (repeatable)")

    backend_opts = argparse.ArgumentParser(add_help=False)
    backend_opts.add_argument("--backend", default="auto",
                              help=f"one of {', '.join(backend_choices())} (auto: the fastest that runs here)")
    backend_opts.add_argument("--precision", default="fp32", choices=PRECISIONS)
    backend_opts.add_argument("--threads", type=int, default=None, help="worker threads (default: backend's)")

    parser = argparse.ArgumentParser(prog="edgesdk", parents=[_verbosity_options(top_level=True)],
                                     description="Compress, pack and run neural networks on edge hardware.")
    parser.add_argument("--version", action="version", version=f"edgesdk {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("inspect", parents=[common, model_opts], help="per-layer table: op, shape, params, MACs")
    p.add_argument("--no-optimize", action="store_true", help="show the graph as imported, before passes")
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("run", parents=[common, model_opts, backend_opts], help="run a model once")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--input", help=".npy (single-input models) or .npz with one array per input")
    src.add_argument("--random", action="store_true", help="standard-normal random inputs")
    p.add_argument("--seed", type=int, default=0, help="seed for --random")
    p.add_argument("--output", help="save all outputs to this .npz")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("eval", parents=[common, model_opts, backend_opts], help="top-1 accuracy and latency")
    p.add_argument("--data", required=True, help="'digits' or an .npz with arrays x and y")
    p.add_argument("--limit", type=int, default=None, help="evaluate only the first N samples")
    p.set_defaults(func=cmd_eval)

    compression = argparse.ArgumentParser(add_help=False)
    compression.add_argument("-o", "--output", required=True, help="the .edgepkg to write")
    compression.add_argument("--recipe", help="a JSON or YAML recipe (per-layer settings); flags override its defaults. "
                             "finetune also takes a built-in digits recipe by name, e.g. prune+cluster2-25x")
    compression.add_argument("--prune", type=float, help="per-layer magnitude sparsity, e.g. 0.5")
    compression.add_argument("--global-prune", type=float, help="one magnitude threshold across all layers")
    compression.add_argument("--cluster-bits", type=int, help="k-means codebook of 2^B entries (1..8)")
    compression.add_argument("--per-channel", action="store_true", help="one codebook per output channel")
    compression.add_argument("--init", choices=["linear", "kmeans++"], help="k-means initialisation (default linear)")
    compression.add_argument("--nnm-rate", type=float, help="output-channel clustering: fraction of filters removed")
    compression.add_argument("--nnm-mode", choices=["shared", "per_input_channel"])
    compression.add_argument("--fp16", action="store_true", help="store weights, codebooks and centroids as half")
    compression.add_argument("--strict-recipe", action="store_true",
                             help="a recipe pattern that matches no layer is an error (default: a warning)")
    compression.add_argument("--max-drop", type=_percentage_points, metavar="PP",
                             help="refuse to write the package if accuracy fell by more than PP percentage points "
                                  "against the uncompressed model (needs an evaluation dataset)")

    p = sub.add_parser("pack", parents=[common, model_opts, compression], help="compress an ONNX model into an .edgepkg")
    p.add_argument("--eval", metavar="DATA", help="measure accuracy before and after ('digits' or an .npz)")
    p.set_defaults(func=cmd_pack)

    p = sub.add_parser("export", parents=[common, model_opts],
                       help="write a package (or any model) as ONNX with decoded float32 weights")
    p.add_argument("-o", "--output", required=True, help="the .onnx file to write")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("finetune", parents=[common, compression],
                       help="fine-tune a compressed model (CPT for NNM, codebook training), then pack it")
    p.add_argument("model", nargs="?", help="an .onnx model (default: the embedded digits model)")
    p.add_argument("--input-shape", action="append", metavar="NAME=DxD...")
    p.add_argument("--train", default="digits", help="'digits' (its training split) or an .npz with x and y")
    p.add_argument("--test", help="held-out .npz with x and y (default: the digits test split with --train digits)")
    p.add_argument("--epochs", type=_positive_int, default=None, help="training epochs (default: the fine-tuner's)")
    p.add_argument("--batch-size", type=_positive_int, default=None, metavar="N",
                   help="training batch size (default: the fine-tuner's, 64)")
    p.add_argument("--lr", type=float, default=None, help="learning rate (default: the fine-tuner's)")
    p.add_argument("--beta", type=float, default=None, help="CPT pull toward the centroids per step (0, 1]")
    p.add_argument("--prune-ramp", type=float, default=None, metavar="F",
                   help="gradual pruning over this fraction of the retraining epochs (0: one-shot masks)")
    p.set_defaults(func=cmd_finetune)

    from .profile.cli import add_profile_parser
    add_profile_parser(sub, [common, model_opts])

    p = sub.add_parser("devices", parents=[common], help="CPU features, the cpu backend's kernel path, OpenCL devices")
    p.set_defaults(func=cmd_devices)

    p = sub.add_parser("quickstart", parents=[common], help="the embedded default model end to end")
    p.set_defaults(func=cmd_quickstart)

    from .remote.cli import add_remote_parser
    add_remote_parser(sub, common)
    return parser


def _verbosity_options(top_level: bool) -> argparse.ArgumentParser:
    """-q/-v, accepted before the command (``top_level``: it sets the defaults) and after it
    (argparse.SUPPRESS there: a subcommand not given them keeps what came before the command)."""
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument("-q", "--quiet", action="store_true", default=False if top_level else argparse.SUPPRESS,
                         help="errors and results only: no progress bars, notes or warnings")
    options.add_argument("-v", "--verbose", action="count", default=0 if top_level else argparse.SUPPRESS,
                         help="also say what was chosen (backend, device); -vv: debug logs")
    return options


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line on ``argv`` (default: ``sys.argv[1:]``); returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.quiet and args.verbose:
        parser.error("choose -q (quiet) or -v (verbose), not both")
    restore = _configure_output(args)
    try:
        return _run(args)
    finally:
        restore()


def _run(args: argparse.Namespace) -> int:
    """The command, with errors as one line and an exit status."""
    try:
        return args.func(args)
    except EdgeSDKError as exc:
        if args.debug:
            raise
        print(f"edgesdk: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("edgesdk: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`edgesdk inspect m.onnx | head`): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:  # a bug, not bad input: say so briefly, --debug for details
        if args.debug:
            raise
        print(f"edgesdk: internal error: {type(exc).__name__}: {exc} (rerun with --debug for the "
              f"traceback and please report it)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
