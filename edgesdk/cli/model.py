"""``edgesdk inspect|run|eval|export|devices|quickstart``: the commands over one model (or none)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from ..errors import EdgeSDKError
from .inputs import load_feeds, open_session, parse_input_shapes, parse_outputs
from .output import atomic_write, bars, describe_array, emit_json, format_bytes, format_count, table


# -- inspect ---------------------------------------------------------------------------------
def cmd_inspect(args: argparse.Namespace) -> int:
    from ..runtime.cost import layer_costs
    if args.memory_budget is not None:
        return _inspect_batch_plan(args)
    sess = open_session(args, model=_rebatched(args) if args.batch else None)
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
                   "macs": sum(x.macs for x in layers), "bytes_moved": sum(x.bytes_moved for x in layers),
                   "weight_bytes": weight_bytes,
                   "stored_bytes": sum(t.stored_nbytes for t in graph.constants()),
                   "peak_activation_bytes": sess.plan.peak_activation_bytes},
    }
    errors = _layer_errors(graph)
    uncoded = _bytes_before_huffman(graph)
    for x, node in zip(summary["layers"], graph.nodes):  # the table's columns, in the JSON too
        x["weights"] = _weight_encoding(graph, node)
        x["stored_bytes"] = _stored_bytes(graph, node)
        x["bits_per_weight"] = _bits_per_weight(graph, node, uncoded)
        if x["name"] in errors:
            x["error_rms"] = errors[x["name"]]
    if args.json:
        emit_json(summary)
        return 0
    rows = [[str(i), x.name, x.op, "x".join(map(str, x.output_shape)), format_count(x.params),
             format_count(x.macs), _weight_encoding(graph, node), format_bytes(_stored_bytes(graph, node)),
             _format_bits(summary["layers"][i]["bits_per_weight"]), f"{errors[x.name]:.3f}" if x.name in errors else ""]
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
    print(table(rows, ["#", "name", "op", "output", "params", "MACs", "weights", "stored", "bits/w", "rms err"],
                 right={0, 4, 5, 7, 8, 9}))
    t = summary["totals"]
    print(f"\ntotal: {t['layers']} layers, {format_count(t['params'])} params "
          f"({format_bytes(t['stored_bytes'])} stored, {format_bytes(weight_bytes)} as dense fp32), "
          f"{format_count(t['macs'])} MACs, peak activations {t['peak_activation_bytes'] / 1024:.1f} KiB")
    return 0


def _rebatched(args: argparse.Namespace):
    """The model (optimised unless --no-optimize) as a Graph at batch ``--batch``."""
    from ..loader import load_model
    from ..passes import optimize
    from ..runtime.batch_plan import rebatch
    graph = load_model(args.model, parse_input_shapes(args.input_shape), parse_outputs(args.outputs))
    if not args.no_optimize:
        optimize(graph)
    return rebatch(graph, args.batch)


def _inspect_batch_plan(args: argparse.Namespace) -> int:
    """``inspect --memory-budget BYTES [--batch N]``: the plan a budgeted Session would run, with
    the unconstrained batch and the best single sub-batch measured beside it."""
    from ..backends.cpu.staged import plan_budgeted
    from ..progress import Progress
    from ..runtime.batch_plan import check_memory_budget
    from ..runtime.plan import make_plan
    from .inputs import parse_size
    budget = check_memory_budget(parse_size(args.memory_budget))
    if args.threads is not None and args.threads < 1:
        raise EdgeSDKError(f"--threads must be a positive integer, got {args.threads}")
    graph = _rebatched(args) if args.batch else None
    if graph is None:
        from ..loader import load_model
        from ..passes import optimize
        graph = load_model(args.model, parse_input_shapes(args.input_shape), parse_outputs(args.outputs))
        if not args.no_optimize:
            optimize(graph)
    backend, plan = plan_budgeted(make_plan(graph), precision="fp32", threads=args.threads, budget=budget,
                                  progress=Progress("measuring stages"), compare=True)
    backend.close()
    if args.json:
        emit_json({"model": str(args.model), "batch_plan": plan.to_dict()})
        return 0
    print(f"{args.model}: graph {graph.name!r}, cpu backend")
    for line in plan.describe():
        print(line)
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


def _bytes_before_huffman(graph) -> dict[str, int]:
    """Layer name -> its weight's stored bytes before Huffman coding, from the package's stats."""
    layers = (graph.metadata.get("compression") or {}).get("layers") or []
    return {r["name"]: r["bytes_before_huffman"] for r in layers
            if isinstance(r, dict) and isinstance(r.get("name"), str) and type(r.get("bytes_before_huffman")) is int}


def _bits_per_weight(graph, node, uncoded: dict[str, int]) -> dict | None:
    """Stored bits per weight of a Conv / Gemm weight: {"stored": b} and, for a Huffman-coded one,
    {"before_huffman": b} too (from the pack statistics)."""
    if node.op not in ("Conv", "Gemm") or len(node.inputs) < 2:
        return None
    weight = graph.tensors.get(node.inputs[1])
    if weight is None or not weight.is_constant or not weight.size:
        return None
    out = {"stored": 8 * weight.stored_nbytes / weight.size}
    if weight.encoding is not None and weight.encoding.kind == "huffman" and node.name in uncoded:
        out["before_huffman"] = 8 * uncoded[node.name] / weight.size
    return out


def _format_bits(bits: dict | None) -> str:
    if bits is None:
        return ""
    if "before_huffman" in bits:
        return f"{bits['before_huffman']:.2f}->{bits['stored']:.2f}"
    return f"{bits['stored']:.2f}"


def _weight_encoding(graph, node) -> str:
    from ..quant.encode import INTEGER_WEIGHT_OPS
    index = 1 if node.op in ("Conv", "Gemm") else 3 if node.op in INTEGER_WEIGHT_OPS else None
    weight = graph.tensors.get(node.inputs[index]) if index is not None and len(node.inputs) > index else None
    if weight is None or not weight.is_constant:
        return ""
    return weight.encoding.describe() if weight.encoding is not None else str(weight.dtype).replace("float", "fp")


def _stored_bytes(graph, node) -> int:
    return sum(graph.tensors[i].stored_nbytes for i in node.inputs if i and graph.tensors[i].is_constant)


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


def cmd_run(args: argparse.Namespace) -> int:
    sess = open_session(args)
    outputs = sess.run(load_feeds(args, sess))
    if args.output:
        out = Path(args.output)
        atomic_write(out, lambda tmp: _save_npz(tmp, outputs))
    report = {"model": str(args.model), "backend": sess.backend, "precision": sess.precision,
              "outputs": {k: describe_array(v) for k, v in outputs.items()}, "saved_to": args.output}
    if args.json:
        emit_json(report)
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


# -- eval ------------------------------------------------------------------------------------
def cmd_eval(args: argparse.Namespace) -> int:
    from ..datasets import load_dataset
    from ..evaluation import evaluate
    from ..progress import Progress
    data = load_dataset(args.data)
    sess = open_session(args)
    bar = Progress("evaluating", leave=False)
    result = evaluate(sess, data, limit=args.limit, progress=lambda done, total: bar(done, total, ""))
    report = {"model": str(args.model), "backend": sess.backend, "precision": sess.precision,
              **result.to_dict()}
    if args.json:
        emit_json(report)
        return 0
    print(f"{args.model} on {result.dataset} ({result.samples} samples), backend {sess.backend} "
          f"{sess.precision}")
    print(f"top-1 accuracy: {100 * result.accuracy:.2f}% ({result.correct}/{result.samples})")
    print(f"latency per batch of {result.batch}: {result.latency}")
    return 0


# -- export ----------------------------------------------------------------------------------
def cmd_export(args: argparse.Namespace) -> int:
    from ..export import export_onnx
    path = export_onnx(args.model, args.output, input_shapes=parse_input_shapes(args.input_shape),
                       outputs=parse_outputs(args.outputs))
    report = {"model": str(args.model), "output": str(path), "bytes": path.stat().st_size}
    if args.json:
        emit_json(report)
        return 0
    print(f"wrote {path} ({format_bytes(report['bytes'])}): ONNX with float32 weights from {args.model}")
    return 0


# -- quickstart ------------------------------------------------------------------------------
def cmd_quickstart(args: argparse.Namespace) -> int:
    from ..quickstart import run_quickstart
    report = run_quickstart(log=None if args.json else print, progress=bars())
    if args.json:
        emit_json(report)
    return 0


# -- devices ---------------------------------------------------------------------------------
def cmd_devices(args: argparse.Namespace) -> int:
    from .. import native
    from ..backends.cpu import physical_cores
    features = native.cpu_features()
    cpu = {"arch": features.arch, "vendor": features.vendor, "model": features.model,
           "features": sorted(name for name, present in features.flags.items() if present),
           "isa_path": native.active_isa(), "supported_isas": native.supported_isas(),
           "physical_cores": physical_cores()}
    try:
        from ..backends.opencl import describe_devices
        opencl, opencl_note = describe_devices(), None
    except (ImportError, EdgeSDKError) as exc:
        opencl, opencl_note = [], f"no OpenCL device listed: {exc}"
    if args.json:
        emit_json({"cpu": cpu, "opencl": opencl, "opencl_note": opencl_note})
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
