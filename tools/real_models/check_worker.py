"""Check one ONNX file against edgesdk (runs in the project venv, one process per file).

    .venv/bin/python tools/real_models/check_worker.py --model m.onnx --shape 1x3x224x224 \
        --backends reference,cpu,opencl --precisions fp32,fp16 --out result.json

Records the model's op types and those edgesdk's importer lacks; ONNX Runtime's outputs on one
random input; for each backend whether ``edgesdk.Session`` loads it (else the error line), the
max relative error against ONNX Runtime (max |edgesdk - ort| / max |ort|, per output, the worst),
and the nodes placed on the reference fallback (with their share of the model's MACs). Each backend
is checked in every precision asked for (``--precisions fp32,fp16``): the fp16 results, against the
same fp32 ONNX Runtime outputs and with the same metric, go to ``backends_fp16``. Then a census:
the import is replayed continuing past every node the importer refuses (its outputs taken from ONNX
Runtime), so that every blocker of the model is listed, not only the first. The result file is
rewritten after each step, so a crash or timeout keeps what was done (``in_progress`` names the step
that did not finish).
"""
from __future__ import annotations

import argparse
import re
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import onnx

import catalog as C

_NODE_RE = re.compile(r"node '([^']*)'")


def op_types(graph: onnx.GraphProto, out: set[str]) -> set[str]:
    for node in graph.node:
        out.add(node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}")
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                op_types(attr.g, out)
            for g in attr.graphs:
                op_types(g, out)
    return out


def categorize(op: str, msg: str) -> str:
    """A blocker category that several models can share: the op and what about it is refused."""
    if msg.startswith("unsupported operator"):
        return f"{op} (op not supported)"
    if "is only supported on inputs that are constant" in msg:
        return f"{op} on run-time tensors"
    m = re.search(r"gets (\w+) input", msg)
    if m:
        return f"{op} on {m.group(1)} run-time tensors"
    m = re.search(r": (.+?) must be constant \(it is computed at run time here\)", msg)
    if m:
        return f"{op}: {m.group(1)} computed at run time"
    m = re.search(r"casting a run-time tensor to (\w+)", msg)
    if m:
        return f"Cast of a run-time tensor to {m.group(1)}"
    text = _NODE_RE.sub("node", msg)
    text = re.sub(r"'[^']*'", "'…'", text)
    text = re.sub(r"\([\d, ]*\)|\[[\d, ]*\]|\b\d+\b", "N", text)
    text = text.split(";")[0].strip()
    text = re.sub(r"^node(?: \(\w+\))?:? ?", "", text)
    return f"{op}: {text}"[:140]


class Recorder:
    def __init__(self, path: Path, base: dict):
        self.path = path
        self.data = base

    def step(self, name: str | None) -> None:
        if name is None:
            self.data.pop("in_progress", None)
        else:
            self.data["in_progress"] = name
        self.save()

    def save(self) -> None:
        C.write_json_atomic(self.path, self.data)


def error_line(exc: BaseException) -> str:
    return C.first_line(exc, 600)


def ort_run(path: str, model: onnx.ModelProto, feeds: dict, threads: int, all_outputs: bool = False):
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    if not all_outputs:
        sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        return dict(zip(names, sess.run(names, feeds)))
    # every top-level node output as a graph output: the census takes refused nodes' values from here
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for vi in m.graph.input:  # fix the dynamic dims to the fed shapes so inference types everything
        if vi.name in feeds:
            dims = vi.type.tensor_type.shape.dim
            for d, n in zip(dims, feeds[vi.name].shape):
                d.Clear()
                d.dim_value = int(n)
    try:
        m = onnx.shape_inference.infer_shapes(m)
    except Exception:  # noqa: BLE001 - inference is a help, not a need
        pass
    known = {vi.name: vi for vi in list(m.graph.value_info) + list(m.graph.output)}
    have = {o.name for o in m.graph.output}
    for node in m.graph.node:
        for o in node.output:
            if o and o not in have:
                vi = known.get(o)
                m.graph.output.append(vi if vi is not None and vi.type.HasField("tensor_type")
                                      else onnx.ValueInfoProto(name=o))
                have.add(o)
    sess = ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))


def make_feeds(model: onnx.ModelProto, shape: tuple[int, ...], seed: int = 0) -> tuple[dict, dict]:
    """One standard-normal input per graph input (seed 0): the first of ``shape``, the others of their
    static dims (dynamic ones 1). Returns (feeds, input_shapes)."""
    inits = {i.name for i in model.graph.initializer}
    inputs = [vi for vi in model.graph.input if vi.name not in inits]
    rng = np.random.default_rng(seed)
    feeds, input_shapes = {}, {}
    for k, vi in enumerate(inputs):
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1 for d in vi.type.tensor_type.shape.dim]
        s = tuple(shape) if k == 0 else tuple(dims)
        dtype = onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        feeds[vi.name] = rng.standard_normal(s).astype(dtype)
        input_shapes[vi.name] = s
    return feeds, input_shapes


def compare(got: dict, want: dict) -> tuple[float, dict]:
    per = {}
    worst = 0.0
    for name, ref in want.items():
        if name not in got:
            raise AssertionError(f"output {name!r} missing from edgesdk's results")
        a = np.asarray(got[name])
        if a.shape != ref.shape:
            raise AssertionError(f"output {name!r}: shape {a.shape} != ONNX Runtime's {ref.shape}")
        if ref.dtype.kind not in "fc":
            err = float(np.mean(a != ref))  # integer outputs: the share that differs
        else:
            scale = float(np.max(np.abs(ref))) if ref.size else 1.0
            diff = np.abs(a.astype(np.float64) - ref.astype(np.float64))
            err = float(np.max(diff) / max(scale, 1e-12)) if ref.size else 0.0
            if not np.all(np.isfinite(a)) and np.all(np.isfinite(ref)):
                err = float("inf")
        per[name] = err
        worst = max(worst, err)
    return worst, per


def fallback_info(sess) -> dict:
    """The nodes a backend left on the reference fallback, by op, with their share of the MACs."""
    from edgesdk.runtime.cost import node_macs
    impl = sess._impl
    reasons = getattr(impl, "fallback_reasons", None)
    reasons = reasons() if callable(reasons) else reasons
    if reasons is None:
        return {}
    nodes = {n.name: n for n in sess.graph.nodes}
    macs = {n.name: _macs(node_macs, n, sess.graph) for n in sess.graph.nodes}
    total = sum(macs.values()) or 1
    ops: dict[str, int] = {}
    notes: dict[str, str] = {}
    fb_macs = 0
    heaviest: dict = {}
    for name, note in reasons.items():
        node = nodes.get(name)
        op = node.op if node is not None else "?"
        ops[op] = ops.get(op, 0) + 1
        notes.setdefault(op, note)
        fb_macs += macs.get(name, 0)
        share = macs.get(name, 0) / total
        if not heaviest or share > heaviest["macs_share"]:
            heaviest = {"node": name, "op": op, "macs_share": share, "note": note}
    placements = getattr(impl, "placements", None)
    placements = placements() if callable(placements) else placements
    counts: dict[str, int] = {}
    for p in (placements or {}).values():
        counts[p] = counts.get(p, 0) + 1
    # issue 13's bar: no fallback node carrying more than 1% of the model's MACs (max_node_macs_share)
    return {"nodes": len(reasons), "ops": ops, "notes": notes, "macs_share": fb_macs / total,
            "max_node_macs_share": heaviest.get("macs_share", 0.0), "heaviest_node": heaviest or None,
            "placements": counts}


def _macs(fn, node, graph) -> int:
    try:
        return int(fn(node, graph))
    except Exception:  # noqa: BLE001
        return 0


def census(path: str, model: onnx.ModelProto, input_shapes: dict, ort_values) -> dict:
    """Replay the import, continuing past each refused node; list every refusal."""
    from edgesdk import onnx_import as oi
    from edgesdk.errors import EdgeSDKError

    blockers: list[dict] = []
    tainted: set[str] = set()
    values: dict = {}
    orig = oi._Importer._import_node

    def patched(self, proto, index):
        try:
            orig(self, proto, index)
        except EdgeSDKError as exc:
            msg = str(exc)
            cut = msg.find("; supported operators:")
            msg = msg[:cut] if cut >= 0 else msg
            op = proto.op_type if proto.domain in ("", "ai.onnx") else f"{proto.domain}.{proto.op_type}"
            after = any(i in tainted for i in proto.input if i)
            blockers.append({"node": proto.name or f"{proto.op_type}_{index}", "op": op,
                             "error": msg[:400], "category": categorize(op, msg), "after_blocker": after})
            if not values:
                values.update(ort_values())
            constant = all(self.graph.const(i) is not None for i in proto.input if i)
            for o in proto.output:
                if not o or o in self.graph.tensors:
                    continue
                if o not in values:
                    raise RuntimeError(f"census: no ONNX Runtime value for {o!r}") from None
                v = np.asarray(values[o])
                if constant:
                    self.graph.add_constant(o, v)
                else:
                    self.graph.add_tensor(o, v.shape, v.dtype)
                    tainted.add(o)
            return
        if any(i in tainted for i in proto.input if i):
            tainted.update(o for o in proto.output if o)

    oi._Importer._import_node = patched
    try:
        oi.import_model(model, input_shapes, source=path)
        status = "complete"
    except Exception as exc:  # noqa: BLE001 - a refusal outside nodes (inputs, opset) ends the census
        status = f"stopped: {error_line(exc)}"
        if not blockers:
            blockers.append({"node": None, "op": "-", "error": str(exc)[:400],
                             "category": categorize("model", str(exc)), "after_blocker": False})
    finally:
        oi._Importer._import_node = orig
    return {"status": status, "blockers": blockers}


def check_backend(r: dict, rec: Recorder, path: str, model: onnx.ModelProto, backend: str, precision: str,
                  threads: int, input_shapes: dict, feeds: dict, want: dict | None) -> None:
    """Load, run and compare one backend in one precision; the results go into ``r``."""
    import edgesdk
    from edgesdk.errors import BackendUnavailableError

    t = time.monotonic()
    try:
        sess = edgesdk.Session(path, backend=backend, precision=precision,
                               threads=threads if backend != "reference" else None, input_shapes=input_shapes)
    except BackendUnavailableError as exc:
        r.update(unavailable=True, error=error_line(exc))
        return
    except Exception as exc:  # noqa: BLE001 - the load error is the result
        msg = str(exc)
        node = _NODE_RE.search(msg)
        op = next((n.op_type for n in model.graph.node if node and n.name == node.group(1)), "model")
        r.update(error=error_line(exc), category=categorize(op, msg.split("; supported operators:")[0]),
                 load_seconds=round(time.monotonic() - t, 2))
        if not isinstance(exc, edgesdk.EdgeSDKError):
            r["traceback"] = traceback.format_exc()[-3000:]
        return
    r.update(loads=True, load_seconds=round(time.monotonic() - t, 2), backend_used=sess.backend)
    rec.save()
    try:
        fb = fallback_info(sess)
        if fb:
            r["fallback"] = fb
    except Exception as exc:  # noqa: BLE001
        r["fallback_error"] = error_line(exc)
    t = time.monotonic()
    try:
        got = sess.run(feeds)
        r["run_ms"] = round((time.monotonic() - t) * 1e3, 1)
        if want is not None:
            r["max_rel_err"], r["rel_err_per_output"] = compare(got, want)
    except Exception as exc:  # noqa: BLE001
        r["run_error"] = error_line(exc)
    finally:
        sess.close()


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--shape", required=True, help="the first input's shape, e.g. 1x3x224x224")
    p.add_argument("--backends", default="reference,cpu,opencl")
    p.add_argument("--precisions", default="fp32,fp16", help="fp32 results go to backends, fp16 to backends_fp16")
    p.add_argument("--out", required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--no-census", action="store_true")
    args = p.parse_args(argv)
    import edgesdk

    path = args.model
    rec = Recorder(Path(args.out), {"path": path, "backends": {}, "errors": {}})
    rec.step("read")
    model = onnx.load(path)
    supported = set(edgesdk.supported_operators())
    ops = sorted(op_types(model.graph, set()))
    rec.data.update(
        op_types=ops, missing_ops=[o for o in ops if o not in supported], nodes=len(model.graph.node),
        file_opset=next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None),
        producer=f"{model.producer_name} {model.producer_version}".strip())
    feeds, input_shapes = make_feeds(model, tuple(int(d) for d in args.shape.split("x")))
    rec.data["inputs"] = {k: list(v) for k, v in input_shapes.items()}

    rec.step("onnxruntime")
    want = None
    t = time.monotonic()
    try:
        want = ort_run(path, model, feeds, args.threads)
        rec.data["ort_seconds"] = round(time.monotonic() - t, 2)
    except Exception as exc:  # noqa: BLE001
        rec.data["errors"]["onnxruntime"] = error_line(exc)

    for precision in [x for x in args.precisions.split(",") if x]:
        slot = "backends" if precision == "fp32" else f"backends_{precision}"
        for backend in [b for b in args.backends.split(",") if b]:
            rec.step(backend if precision == "fp32" else f"{backend}/{precision}")
            r: dict = {"loads": False}
            rec.data.setdefault(slot, {})[backend] = r
            check_backend(r, rec, path, model, backend, precision, args.threads, input_shapes, feeds, want)

    if not args.no_census:
        rec.step("census")
        try:
            rec.data["census"] = census(path, model, input_shapes,
                                        lambda: ort_run(path, model, feeds, args.threads, all_outputs=True))
        except Exception as exc:  # noqa: BLE001
            rec.data["errors"]["census"] = error_line(exc)
    rec.step(None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
