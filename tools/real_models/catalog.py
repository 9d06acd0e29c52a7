"""The real-model catalog of issue 13 and the paths and pins shared by tools/real_models.py and its workers.

Pure Python (no torch, no edgesdk): imported by the driver in the project venv, by
``export_worker.py`` in the export venv and by ``check_worker.py`` in the project venv.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
# Everything downloaded or generated lives here (one .gitignore line); EDGESDK_REAL_MODELS_CACHE moves it.
CACHE = Path(os.environ.get("EDGESDK_REAL_MODELS_CACHE") or HERE / ".cache")
EXPORT_VENV = CACHE / "venv-export"
WHEELS = CACHE / "wheels"
ONNX_DIR = CACHE / "onnx"
RESULTS_DIR = CACHE / "results"
VERSIONS_FILE = CACHE / "versions.json"

# What the export venv gets. torchvision 0.29 does not import beside torch 2.13 (the project venv's),
# hence a venv of its own. The others are pinned to what was tested (tools/real_models/README.md).
EXPORT_REQUIREMENTS = [
    "torch==2.14.1",
    "torchvision==0.29.1",
    "timm==1.0.31",
    "ultralytics==8.4.190",
    "onnx==1.23.2",
    "onnxscript==0.7.2",
]
RAPIDOCR = "rapidocr_onnxruntime==1.4.4"
EXPORTERS = ("legacy", "dynamo")
DEFAULT_OPSET = 17
# torch 2.14's dynamo exporter translates at opset 18 (torchlib); asked for 17 it down-converts with
# onnx's version converter, which on these models either fails (the file stays at 18) or writes an
# invalid graph (Split with opset 18's num_outputs attribute in an opset-17 model: ONNX Runtime and
# onnx.checker refuse it). So dynamo exports use max(opset, 18) unless --strict-opset is given.
DYNAMO_MIN_OPSET = 18


def effective_opset(exporter: str, opset: int, strict: bool = False) -> int:
    return max(opset, DYNAMO_MIN_OPSET) if exporter == "dynamo" and not strict else opset


@dataclass(frozen=True)
class ModelSpec:
    name: str               # catalog name (also the file stem)
    source: str             # torchvision | timm | ultralytics | rapidocr
    arch: str               # constructor name in its package, or the .onnx file inside the wheel
    shape: tuple[int, ...]  # the batch-1 input exported / checked
    kind: str               # classifier | segmenter | detector | ocr
    kwargs: dict = field(default_factory=dict, hash=False, compare=False)
    note: str = ""

    @property
    def exporters(self) -> tuple[str, ...]:
        return ("wheel",) if self.source == "rapidocr" else EXPORTERS


def _c(name, source, arch, size=224, **kw):
    return ModelSpec(name, source, arch, (1, 3, size, size), "classifier", kw)


CATALOG: list[ModelSpec] = [
    # torchvision classifiers (weights=None: random weights, nothing downloaded)
    _c("tv_resnet18", "torchvision", "resnet18"),
    _c("tv_mobilenet_v2", "torchvision", "mobilenet_v2"),
    _c("tv_mobilenet_v3_small", "torchvision", "mobilenet_v3_small"),
    _c("tv_mobilenet_v3_large", "torchvision", "mobilenet_v3_large"),
    _c("tv_efficientnet_b0", "torchvision", "efficientnet_b0"),
    _c("tv_regnet_y_400mf", "torchvision", "regnet_y_400mf"),
    _c("tv_squeezenet1_1", "torchvision", "squeezenet1_1"),
    _c("tv_densenet121", "torchvision", "densenet121"),
    _c("tv_mnasnet1_0", "torchvision", "mnasnet1_0"),
    _c("tv_shufflenet_v2_x1_0", "torchvision", "shufflenet_v2_x1_0"),
    _c("tv_convnext_tiny", "torchvision", "convnext_tiny"),
    # torchvision segmenters (weights_backbone=None too: its default is ImageNet weights, a download)
    ModelSpec("tv_lraspp_mobilenet_v3_large", "torchvision", "lraspp_mobilenet_v3_large", (1, 3, 256, 256),
              "segmenter", {"weights_backbone": None}),
    ModelSpec("tv_deeplabv3_mobilenet_v3_large", "torchvision", "deeplabv3_mobilenet_v3_large", (1, 3, 256, 256),
              "segmenter", {"weights_backbone": None}),
    # timm (pretrained=False)
    _c("timm_vit_tiny_patch16_224", "timm", "vit_tiny_patch16_224"),
    _c("timm_deit_tiny_patch16_224", "timm", "deit_tiny_patch16_224"),
    _c("timm_convnext_atto", "timm", "convnext_atto"),
    _c("timm_mobilevit_xxs", "timm", "mobilevit_xxs", 256),  # its unfold needs H/32 even: 256, not 224
    _c("timm_efficientformer_l1", "timm", "efficientformer_l1"),
    _c("timm_efficientformerv2_s0", "timm", "efficientformerv2_s0"),
    _c("timm_fastvit_t8", "timm", "fastvit_t8", reparameterize=True),  # as deployed: MobileOne branches fused
    _c("timm_ghostnet_100", "timm", "ghostnet_100"),
    _c("timm_mobilenetv3_large_100", "timm", "mobilenetv3_large_100"),
    # ultralytics, built from the yaml (random weights), exported as its own exporter prepares the module
    ModelSpec("yolov8n", "ultralytics", "yolov8n.yaml", (1, 3, 320, 320), "detector"),
    ModelSpec("yolo11n", "ultralytics", "yolo11n.yaml", (1, 3, 320, 320), "detector"),
    # shipped ONNX files (paddle2onnx) inside the rapidocr_onnxruntime 1.4.4 wheel; dynamic dims fixed here
    ModelSpec("ppocr_v4_det", "rapidocr", "ch_PP-OCRv4_det_infer.onnx", (1, 3, 320, 320), "ocr"),
    ModelSpec("ppocr_v4_rec", "rapidocr", "ch_PP-OCRv4_rec_infer.onnx", (1, 3, 48, 320), "ocr"),
    ModelSpec("ppocr_mobile_v2_cls", "rapidocr", "ch_ppocr_mobile_v2.0_cls_infer.onnx", (1, 3, 48, 192), "ocr"),
]
BY_NAME = {s.name: s for s in CATALOG}


def select(names: list[str] | None) -> list[ModelSpec]:
    """Catalog entries by name; a name may also be a source (``timm``) or a glob-free substring."""
    if not names:
        return list(CATALOG)
    out: list[ModelSpec] = []
    for n in names:
        hits = [BY_NAME[n]] if n in BY_NAME else [s for s in CATALOG if s.source == n or s.kind == n] or \
            [s for s in CATALOG if n in s.name]
        if not hits:
            raise SystemExit(f"unknown model {n!r}; known: {', '.join(BY_NAME)} (or a source/kind)")
        out += [s for s in hits if s not in out]
    return out


def load_versions() -> dict[str, str]:
    try:
        return json.loads(VERSIONS_FILE.read_text())
    except (OSError, ValueError):
        return {}


def versions_tag(versions: dict[str, str]) -> str:
    """A readable cache key for the export venv's package versions."""
    short = {"torch": "torch", "torchvision": "tv", "timm": "timm", "ultralytics": "ul", "onnx": "onnx",
             "onnxscript": "onnxscript"}
    parts = [f"{k}{re.sub(r'[^0-9A-Za-z.]+', '', versions.get(p, 'none'))}" for p, k in short.items()]
    return "_".join(parts)


def export_stem(spec: ModelSpec, exporter: str, opset: int) -> str:
    return spec.name if exporter == "wheel" else f"{spec.name}.{exporter}.opset{opset}"


def export_dir(spec: ModelSpec, versions: dict[str, str]) -> Path:
    if spec.source == "rapidocr":
        return ONNX_DIR / RAPIDOCR.replace("==", "-")
    return ONNX_DIR / versions_tag(versions)


def file_sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


def write_json_atomic(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True, default=str))
    os.replace(tmp, path)


def first_line(exc: BaseException | str, limit: int = 300) -> str:
    text = str(exc).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    line = lines[0] if lines else ""
    name = type(exc).__name__ if isinstance(exc, BaseException) else ""
    line = f"{name}: {line}" if name and line else (name or line)
    return line[:limit]
