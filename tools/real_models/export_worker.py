"""Build one catalog model with random weights and export it to ONNX (runs inside the export venv).

    <export venv>/bin/python tools/real_models/export_worker.py --name tv_resnet18 \
        --exporters legacy,dynamo --opset 17 --out-dir DIR

Writes DIR/<name>.<exporter>.opset<N>.onnx (temp file + rename) and a .json beside it with the
status, the one-line error of a failure, the file's opset, size and the seconds it took. All
network access is blocked and recorded: nothing may be downloaded (weights, fonts, configs).
"""
from __future__ import annotations

import argparse
import os
import socket
import sys
import time
import traceback
import warnings
from pathlib import Path

import catalog as C

NETWORK_ATTEMPTS: list[str] = []


def block_network() -> None:
    """Refuse (and remember) every connection or DNS lookup: the exports must work offline."""
    def refuse(what):
        NETWORK_ATTEMPTS.append(what)
        raise OSError(f"network access blocked by tools/real_models ({what})")

    def connect(self, address):  # noqa: ARG001
        refuse(f"connect {address}")

    def connect_ex(self, address):  # noqa: ARG001
        refuse(f"connect {address}")

    def getaddrinfo(host, *a, **k):  # noqa: ARG001
        if host in (None, "localhost", "127.0.0.1", "::1"):
            return _getaddrinfo(host, *a, **k)
        refuse(f"resolve {host}")

    _getaddrinfo = socket.getaddrinfo
    socket.socket.connect = connect
    socket.socket.connect_ex = connect_ex
    socket.getaddrinfo = getaddrinfo


def randomize_norms(model) -> None:
    """Non-trivial BatchNorm/LayerNorm statistics and affine terms (default init makes BN an identity,
    which would hide folding errors); deterministic under the caller's seed."""
    import torch
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.running_mean is not None:
                m.running_mean.normal_(0.0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
            if isinstance(m, (torch.nn.modules.batchnorm._BatchNorm, torch.nn.LayerNorm, torch.nn.GroupNorm)):
                if getattr(m, "weight", None) is not None:
                    m.weight.uniform_(0.5, 1.5)
                if getattr(m, "bias", None) is not None:
                    m.bias.normal_(0.0, 0.1)


def build(spec: C.ModelSpec):
    import torch
    torch.manual_seed(0)
    if spec.source == "torchvision":
        import torchvision
        model = torchvision.models.get_model(spec.arch, weights=None, **spec.kwargs)
        if spec.kind == "segmenter":
            model = _OutOnly(model)
    elif spec.source == "timm":
        import timm
        kwargs = dict(spec.kwargs)
        reparam = kwargs.pop("reparameterize", False)
        model = timm.create_model(spec.arch, pretrained=False, **kwargs)
        if reparam:  # timm's deployment step for FastViT/MobileOne: random norms first, then fuse them
            from timm.utils.model import reparameterize_model
            randomize_norms(model)
            return reparameterize_model(model.eval())
    elif spec.source == "ultralytics":
        return build_yolo(spec)
    else:
        raise ValueError(f"{spec.source} models are not built here")
    randomize_norms(model)
    return model.eval()


def _OutOnly(model):
    import torch

    class OutOnly(torch.nn.Module):
        """torchvision segmenters return {'out': ...}; export the tensor."""
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x)["out"]

    return OutOnly(model)


def build_yolo(spec: C.ModelSpec):
    """YOLO from its yaml (random weights), prepared as ultralytics' own ONNX exporter prepares it:
    eval, Conv+BN fused, the Detect head in export mode (one (1, 84, anchors) output), C2f on split."""
    import copy

    import torch
    from ultralytics import YOLO
    from ultralytics.nn.modules import C2f, Detect

    torch.manual_seed(0)
    yolo = YOLO(spec.arch)  # a .yaml: builds the model, downloads nothing
    model = copy.deepcopy(yolo.model)
    randomize_norms(model)
    for p in model.parameters():
        p.requires_grad = False
    model = model.float().eval()
    model = model.fuse(verbose=False)
    imgsz = spec.shape[2:]
    for m in model.modules():  # as ultralytics/engine/exporter.py does for format="onnx", nms=False
        if isinstance(m, Detect):
            m.dynamic = False
            m.export = True
            m.format = "onnx"
            m.max_det = min(300, sum(int(imgsz[0] / s) * int(imgsz[1] / s) for s in model.stride.tolist()))
            m.agnostic_nms = False
            m.xyxy = False
            m.shape = None
        elif isinstance(m, C2f):
            m.forward = m.forward_split
    return model


def export_one(model, spec: C.ModelSpec, exporter: str, opset: int, path: Path) -> None:
    import torch
    x = torch.randn(*spec.shape, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        model(x)  # a forward pass first: builds lazy state (ultralytics anchors) and fails early
    kwargs = dict(input_names=["input"], opset_version=opset)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "legacy":
            torch.onnx.export(model, (x,), str(path), dynamo=False, do_constant_folding=True, **kwargs)
        else:
            torch.onnx.export(model, (x,), str(path), dynamo=True, external_data=False, **kwargs)


def error_line(exc: BaseException) -> tuple[str, str]:
    """(the most telling line, the full text) of an export failure."""
    full = "".join(traceback.format_exception(exc))
    text = str(exc)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if "## Exception summary" in text:  # the dynamo exporter's report: the cause is under this heading
        after = text.split("## Exception summary", 1)[1]
        cand = [ln.strip() for ln in after.splitlines() if ln.strip() and not ln.startswith("#")]
        if cand:
            return f"{type(exc).__name__}: {cand[0]}"[:300], full[-6000:]
    cause = exc.__cause__ or exc.__context__
    if cause is not None and (not lines or "step 1/3" in lines[0] or "step 2/3" in lines[0]):
        return f"{type(exc).__name__} <- {C.first_line(cause)}"[:300], full[-6000:]
    return C.first_line(exc), full[-6000:]


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--name", required=True)
    p.add_argument("--exporters", default="legacy,dynamo")
    p.add_argument("--opset", type=int, default=C.DEFAULT_OPSET)
    p.add_argument("--out-dir", required=True)
    p.add_argument("--strict-opset", action="store_true")
    args = p.parse_args(argv)
    block_network()
    spec = C.BY_NAME[args.name]
    out_dir = Path(args.out_dir)
    versions = C.load_versions()
    exporters = [e for e in args.exporters.split(",") if e]

    def opset_of(exp: str) -> int:
        return C.effective_opset(exp, args.opset, args.strict_opset)

    def record(exp: str, **fields) -> None:
        stem = C.export_stem(spec, exp, opset_of(exp))
        meta = {"name": spec.name, "exporter": exp, "opset": opset_of(exp), "shape": list(spec.shape),
                "versions": versions, "network_attempts": sorted(set(NETWORK_ATTEMPTS)), **fields}
        C.write_json_atomic(out_dir / f"{stem}.json", meta)

    t = time.monotonic()
    try:
        import torch
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
        model = build(spec)
    except Exception as exc:  # noqa: BLE001 - recorded, not raised
        line, full = error_line(exc)
        for exp in exporters:
            record(exp, status="failed", stage="build", error=f"build: {line}", error_detail=full,
                   seconds=round(time.monotonic() - t, 1))
        print(f"{spec.name}: build failed: {line}", flush=True)
        return 0
    build_s = time.monotonic() - t
    print(f"{spec.name}: built in {build_s:.1f} s", flush=True)
    for exp in exporters:
        stem = C.export_stem(spec, exp, opset_of(exp))
        final = out_dir / f"{stem}.onnx"
        tmp = out_dir / f".{stem}.{os.getpid()}.tmp.onnx"
        t = time.monotonic()
        try:
            export_one(model, spec, exp, opset_of(exp), tmp)
            import onnx
            proto = onnx.load(str(tmp))
            file_opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
            n_nodes = len(proto.graph.node)
            try:  # the dynamo exporter's down-conversion below opset 18 can write invalid graphs
                onnx.checker.check_model(proto)
                checker = None
            except Exception as exc:  # noqa: BLE001
                checker = C.first_line(exc)
            del proto
            os.replace(tmp, final)
            record(exp, status="ok", path=str(final), bytes=final.stat().st_size, sha256_16=C.file_sha(final),
                   file_opset=file_opset, nodes=n_nodes, checker_error=checker, seconds=round(time.monotonic() - t, 1),
                   build_seconds=round(build_s, 1))
            print(f"{spec.name} {exp}: ok in {time.monotonic() - t:.1f} s", flush=True)
        except Exception as exc:  # noqa: BLE001 - recorded, not raised
            line, full = error_line(exc)
            for leftover in (tmp, Path(str(tmp) + ".data")):
                leftover.unlink(missing_ok=True)
            record(exp, status="failed", stage="export", error=line, error_detail=full,
                   seconds=round(time.monotonic() - t, 1))
            print(f"{spec.name} {exp}: FAILED: {line}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
