"""Real models against ONNX Runtime (issue 13): within 1e-4 of ONNX Runtime (fp32) on the reference,
cpu and opencl backends, within 1e-2 in fp16 (cpu, opencl), and no cpu/opencl fallback on a node
carrying more than 1% of the model's MACs.

The error is the one ``tools/real_models.py report`` prints: per output, max |edgesdk - ORT fp32| /
max |ORT fp32|, the worst output; the input is one standard-normal tensor (seed 0). Both, and the
fallback accounting, come from ``tools/real_models/check_worker.py`` (imported, not copied).

* Default part: the three PP-OCR models shipped in the ``rapidocr_onnxruntime==1.4.4`` wheel
  (paddle2onnx files with trained weights), fetched once by the tool's own ``fetch_rapidocr`` (``pip
  download --no-deps``, 15 MiB) into ``$EDGESDK_TEST_CACHE/real_models`` (default
  ``tests/.cache/real_models``), at small input shapes. Without network or package index they skip.
  reference/cpu fp32 and cpu fp16 take ~4 s with -n 2 on the 2-core VM (~20 s when it is shared
  with other jobs). The opencl cases (PP-OCRv4 rec only, see ``PPOCR_OPENCL``) are marked slow: with a cold
  OpenCL program cache (a new machine, or after an edit of ``cl_kernels/``) PoCL compiles ~100
  specialised programs per model and precision, 40-70 s per case; with a warm cache ~2 s.
* Slow part: every export cached by ``tools/real_models.py export`` (``tools/real_models/.cache``, or
  ``$EDGESDK_REAL_MODELS_CACHE``), one test per file and target, at the catalog's input shape: the
  files ``export`` writes by default (legacy at opset 17, dynamo at opset 18, the three wheel files:
  51 files, 255 tests), not the ``--strict-opset`` experiment's. A fresh clone has no such cache:
  building the export venv downloads several GB (torch 2.14 with its CUDA libraries), too much for
  the suite, so they skip and name the commands that make it. With the cache and a warm OpenCL
  program cache they take ~50 s with -n 2 (reference/cpu 18 s of it; ~95 s on a shared machine).
  With a cold program cache the opencl cases compile every architecture's kernels first (66 min in
  the report tool's serial run on the shared VM; 15-30 min with -n 2), far over the suite's budget:
  deselect them then with ``-k "not (test_cached_export and opencl)"``, or run
  ``tools/real_models.py report`` once, which fills the program cache.

Two deliberate departures from "every output against ONNX Runtime":

* PP-OCRv4 det ends in a Sigmoid whose inputs, on any input that is not a text image, are all large
  negative logits (-55..-10 on noise): every output is below 6e-5, where sigmoid(x) ~ exp(x). ONNX
  Runtime's Sigmoid is an approximation with ~1e-7 absolute error there, i.e. 2.1e-3 (320 px) to
  2.6e-2 (64 px) of the largest output, while edgesdk's Sigmoid is within 1.2e-7 of float64. So the
  logits (the Sigmoid's input, made an output of both the edgesdk session and the ONNX Runtime model:
  a graph cut) are compared with ONNX Runtime, and the final output with the float64 sigmoid of ONNX
  Runtime's logits (fp32: within 3.3e-5), or of edgesdk's own logits (fp16: the saturated sigmoid
  turns the logits' absolute error into the output's relative error; fp16 logits near -10 have a
  spacing of 2^-7, so rounding them alone costs 0.25-0.4%, and edgesdk's fp16 logits, within 5e-3
  of ONNX Runtime's, are ~0.03 off at the largest output: 2.7e-2 to 5.2e-2 against ONNX Runtime).

PP-OCRv4 rec is why fp16 sessions keep one-element constants in fp32
(``runtime.precision.round_constant``): rounded to half, the 177 scalar scales and biases of its
PP-LCNetV3 affine blocks (``whswish_b_*.w_0/w_1``) shifted whole tensors coherently and the model
missed 1e-2 on every backend (2.2e-2 to 2.5e-2 at 48x64), the numpy reference's fp16 mode included;
with them in fp32 it is within 8e-3.
"""
from __future__ import annotations

import fcntl
import functools
import importlib.util
import json
import os
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import edgesdk
from conftest import ort_run

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools" / "real_models"))
import catalog  # noqa: E402  (tools/real_models/catalog.py: the models, shapes and cache paths)
import check_worker  # noqa: E402  (the report's metric, feeds and fallback accounting)

TOLERANCE = {"fp32": 1e-4, "fp16": 1e-2}
MAX_FALLBACK_MACS_SHARE = 0.01  # no fallback node may carry more than 1% of the model's MACs
TARGETS = (("reference", "fp32"), ("cpu", "fp32"), ("opencl", "fp32"), ("cpu", "fp16"), ("opencl", "fp16"))
TEST_CACHE = Path(os.environ.get("EDGESDK_TEST_CACHE") or ROOT / "tests" / ".cache") / "real_models"

# Small shapes for the default part (the catalog's are 320x320, 48x320 and 48x192).
PPOCR_SMALL = {"ppocr_v4_det": (1, 3, 64, 64), "ppocr_v4_rec": (1, 3, 48, 64), "ppocr_mobile_v2_cls": (1, 3, 48, 96)}
SETUP_COMMANDS = (".venv/bin/python tools/real_models.py setup && .venv/bin/python tools/real_models.py export")


def _tool():
    """tools/real_models.py as a module (its fetch_rapidocr is reused, not copied)."""
    spec = importlib.util.spec_from_file_location("edgesdk_tool_real_models", ROOT / "tools" / "real_models.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _backend_unavailable(backend: str) -> str | None:
    from ops.op_tester import backend_unavailable
    return backend_unavailable(backend)


# ------------------------------------------------------------------------------------------------
# the oracle and the check
# ------------------------------------------------------------------------------------------------
def _final_sigmoids(model: onnx.ModelProto) -> dict[str, str]:
    """Graph output -> the input of the Sigmoid producing it (PP-OCR det's probability map)."""
    outputs = {o.name for o in model.graph.output}
    return {n.output[0]: n.input[0] for n in model.graph.node if n.op_type == "Sigmoid" and n.output[0] in outputs}


@functools.lru_cache(maxsize=4)
def _oracle(path: str, shape: tuple[int, ...]):
    """(feeds, input_shapes, ONNX Runtime's outputs, {output: sigmoid input}) for one file and shape;
    ONNX Runtime also returns the final Sigmoids' inputs (added as graph outputs)."""
    model = onnx.load(path)
    feeds, input_shapes = check_worker.make_feeds(model, shape)
    sigmoids = _final_sigmoids(model)
    for pre in sigmoids.values():
        model.graph.output.append(onnx.ValueInfoProto(name=pre))
    names = [o.name for o in model.graph.output]
    want = dict(zip(names, ort_run(model, feeds)))
    return feeds, input_shapes, want, sigmoids


def _sigmoid64(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x.astype(np.float64)))


def check_model(path: Path, shape: tuple[int, ...], backend: str, precision: str, model_name: str) -> None:
    reason = _backend_unavailable(backend)
    if reason:
        pytest.skip(reason)
    feeds, input_shapes, want, sigmoids = _oracle(str(path), tuple(shape))
    tol = TOLERANCE[precision]
    outputs = list(want) if sigmoids else None  # the cut: the Sigmoids' inputs become outputs too
    sess = edgesdk.Session(str(path), backend=backend, precision=precision, input_shapes=input_shapes,
                           threads=None if backend == "reference" else 1, outputs=outputs)
    try:
        if backend != "reference":  # the reference backend is what the others fall back to
            fb = check_worker.fallback_info(sess)
            assert "nodes" in fb, f"{backend} reports no fallback_reasons: the fallback check would be vacuous"
            assert fb["max_node_macs_share"] <= MAX_FALLBACK_MACS_SHARE, (
                f"{backend}/{precision}: fallback node with {fb['max_node_macs_share']:.1%} of the MACs: "
                f"{fb['heaviest_node']}")
        got = sess.run(feeds)
    finally:
        sess.close()
    errors = {}
    for name in want:
        if name in sigmoids:  # the probability map (see the module docstring)
            logits = want[sigmoids[name]] if precision == "fp32" else got[sigmoids[name]]
            errors[f"{name} vs float64 sigmoid"] = check_worker.compare({name: got[name]},
                                                                        {name: _sigmoid64(logits)})[0]
        else:
            errors[name] = check_worker.compare({name: got[name]}, {name: want[name]})[0]
    worst = max(errors.values())
    detail = ", ".join(f"{k}: {v:.2e}" for k, v in errors.items())
    assert worst <= tol, f"{backend}/{precision}: max rel error over {tol}: {detail}"


# ------------------------------------------------------------------------------------------------
# default part: PP-OCR from the rapidocr wheel, small shapes
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def ppocr_dir() -> Path:
    """The wheel's PP-OCR files, fetched once (a lock keeps two xdist workers from both fetching)."""
    out_dir = TEST_CACHE / catalog.RAPIDOCR.replace("==", "-")
    names = [s.name for s in catalog.CATALOG if s.source == "rapidocr"]
    TEST_CACHE.mkdir(parents=True, exist_ok=True)
    with open(TEST_CACHE / ".fetch.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not all((out_dir / f"{n}.onnx").exists() for n in names):
            rc = _tool().fetch_rapidocr(TEST_CACHE / "wheels", out_dir)
            if rc:
                pytest.skip(f"cannot fetch the PP-OCR models: `python -m pip download --no-deps "
                            f"{catalog.RAPIDOCR}` failed (no network or package index?)")
    missing = [n for n in names if not (out_dir / f"{n}.onnx").exists()]
    if missing:
        pytest.fail(f"{catalog.RAPIDOCR} lacks {missing}: " + json.dumps(
            [json.loads((out_dir / f"{n}.json").read_text()).get("error") for n in missing]))
    return out_dir


# On opencl the default part runs the op-richest file only (PP-OCRv4 rec: attention, LayerNorm,
# Softmax, GELU besides the convolutions): each file costs ~100 PoCL program compilations per
# precision on a machine without the program cache, 40-70 s each, and the three of them took the
# suite past 15 minutes on a fresh machine. det and cls run on opencl in the cached-export part
# (the wheel files are among its 51) and in `tools/real_models.py report`.
PPOCR_OPENCL = ("ppocr_v4_rec",)


def _ppocr_params():
    for name in PPOCR_SMALL:
        for backend, precision in TARGETS:
            if backend == "opencl" and name not in PPOCR_OPENCL:
                continue
            marks = [pytest.mark.slow] if backend == "opencl" else []
            yield pytest.param(name, backend, precision, id=f"{name}-{backend}-{precision}", marks=marks)


@pytest.mark.parametrize("name,backend,precision", list(_ppocr_params()))
def test_ppocr(ppocr_dir: Path, name: str, backend: str, precision: str) -> None:
    check_model(ppocr_dir / f"{name}.onnx", PPOCR_SMALL[name], backend, precision, name)


def test_report_tool_checks_fp16(ppocr_dir: Path, tmp_path: Path) -> None:
    """check_worker records fp32 and fp16 per backend and the report renders both (the tool's own path)."""
    import subprocess
    out = tmp_path / "cls.json"
    subprocess.run([sys.executable, str(ROOT / "tools" / "real_models" / "check_worker.py"), "--model",
                    str(ppocr_dir / "ppocr_mobile_v2_cls.onnx"), "--shape", "1x3x48x96", "--backends", "reference,cpu",
                    "--precisions", "fp32,fp16", "--no-census", "--threads", "1", "--out", str(out)],
                   check=True, capture_output=True, timeout=600)
    rec = json.loads(out.read_text())
    assert "in_progress" not in rec
    for slot, tol in (("backends", 1e-4), ("backends_fp16", 1e-2)):
        assert set(rec[slot]) == {"reference", "cpu"}
        assert all(r["loads"] and r["max_rel_err"] <= tol for r in rec[slot].values()), rec[slot]
    assert rec["backends_fp16"]["cpu"]["fallback"]["max_node_macs_share"] == 0.0
    rec.update(model="ppocr_mobile_v2_cls", exporter="wheel", export={"file_opset": 11})
    text = _tool().render_report([rec], ["reference", "cpu"], [], {}, ["fp32", "fp16"])
    head, _, row = text.splitlines()[:3]
    assert "| fp32 max rel err | fp16 reference | fp16 cpu | fp32 fallback | fp16 fallback |" in head
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[:4] == ["ppocr_mobile_v2_cls", "wheel (11)", "yes", "yes"] and cells[-2:] == ["none", "none"]
    assert float(cells[-4]) == pytest.approx(rec["backends_fp16"]["reference"]["max_rel_err"], rel=0.06)
    assert "Beyond the tolerance (fp32 0.0001, fp16 0.01; " in text and "): none." in text


# ------------------------------------------------------------------------------------------------
# slow part: every export cached by tools/real_models.py
# ------------------------------------------------------------------------------------------------
def _default_stem(spec: catalog.ModelSpec, exporter: str) -> str:
    return catalog.export_stem(spec, exporter, catalog.effective_opset(exporter, catalog.DEFAULT_OPSET))


def cached_exports() -> list[tuple[str, Path, catalog.ModelSpec]]:
    """(id, .onnx path, catalog entry) of every export `tools/real_models.py export` wrote by default
    into the cache (every package-versions directory) that exported without error."""
    found = []
    for meta_path in sorted(catalog.ONNX_DIR.glob("*/*.json")):
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, ValueError):
            continue
        spec = catalog.BY_NAME.get(meta.get("name"))
        onnx_path = meta_path.with_suffix(".onnx")
        if (spec is None or meta.get("status") != "ok" or meta.get("checker_error") or not onnx_path.exists()
                or meta_path.stem != _default_stem(spec, meta.get("exporter", ""))):
            continue
        found.append((meta_path.stem, onnx_path, spec))
    ids = [i for i, _, _ in found]
    return [(i if ids.count(i) == 1 else f"{p.parent.name}/{i}", p, s) for i, p, s in found]


def _cached_params():
    exports = cached_exports()
    if not exports:
        reason = (f"no real-model exports in {catalog.ONNX_DIR}: make them with `{SETUP_COMMANDS}` (a venv of "
                  f"several GB; not built by the suite)")
        yield pytest.param(None, None, "reference", "fp32", id="no-export-cache", marks=pytest.mark.skip(reason=reason))
        return
    for ident, path, spec in exports:
        for backend, precision in TARGETS:
            yield pytest.param(path, spec, backend, precision, id=f"{ident}-{backend}-{precision}")


@pytest.mark.slow
@pytest.mark.parametrize("path,spec,backend,precision", list(_cached_params()))
def test_cached_export(path: Path, spec: catalog.ModelSpec, backend: str, precision: str) -> None:
    check_model(path, spec.shape, backend, precision, spec.name)
