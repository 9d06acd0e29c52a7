"""Models shipped inside the package."""
from __future__ import annotations

import json
from pathlib import Path

MODELS_DIR = Path(__file__).resolve().parent
DEFAULT_MODEL = MODELS_DIR / "digits_lenet.onnx"


def default_model_path() -> Path:
    """The embedded LeNet-5-class digits CNN (see tools/train_default_model.py)."""
    return DEFAULT_MODEL


def default_model_info() -> dict:
    """Training metadata of the default model: split, preprocessing, measured accuracy."""
    return json.loads(DEFAULT_MODEL.with_suffix(".json").read_text())


def default_recipe_path() -> Path:
    """The compression recipe tuned for the default model without fine-tuning (>= 10x smaller)."""
    return DEFAULT_MODEL.with_suffix(".recipe.json")
