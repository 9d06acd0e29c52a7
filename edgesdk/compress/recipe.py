"""Compression recipes: which pass applies to which layer.

A recipe is JSON or YAML::

    {"default": {"cluster_bits": 4, "per_channel": true, "fp16": true},
     "global_prune": 0.8,
     "layers": [{"match": "*fc*", "prune": 0.9},
                {"match": "/0/Conv", "skip": true}]}

``default`` applies to every compressible layer (Conv and Gemm weights); each entry of ``layers``
whose ``match`` (a shell pattern) matches the layer's node name or weight tensor name overrides
it, in order. ``global_prune`` ranks the weights of all layers that prune together and cuts one
magnitude threshold (per-layer ``prune`` values are then ignored).
"""
from __future__ import annotations

import dataclasses
import fnmatch
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import EdgeSDKError

NNM_MODES = ("shared", "per_input_channel")
INITS = ("linear", "kmeans++")


class RecipeError(EdgeSDKError):
    """A recipe file or option is malformed."""


@dataclass(frozen=True)
class LayerSettings:
    """How one layer's weights are compressed (the fields below); invalid combinations raise
    :class:`RecipeError`."""
    prune: float = 0.0  # fraction of weights set to zero (magnitude)
    cluster_bits: int | None = None  # k-means codebook of 2^bits entries
    per_channel: bool = False  # one codebook per output channel instead of per layer
    init: str = "linear"  # k-means initialisation: linear (Han et al.) or kmeans++
    nnm_rate: float | None = None  # output-channel clustering: fraction of filters removed
    nnm_mode: str = "shared"  # or per_input_channel (seed 003's two readings)
    fp16: bool = False  # store weights / codebooks / centroids as half
    skip: bool = False  # leave this layer dense fp32

    def __post_init__(self) -> None:
        problems = []
        if not 0.0 <= self.prune < 1.0:
            problems.append(f"prune must be in [0, 1), got {self.prune}")
        if self.cluster_bits is not None and not 1 <= self.cluster_bits <= 8:
            problems.append(f"cluster_bits must be 1..8, got {self.cluster_bits}")
        if self.nnm_rate is not None and not 0.0 < self.nnm_rate < 1.0:
            problems.append(f"nnm_rate must be in (0, 1), got {self.nnm_rate}")
        if self.nnm_mode not in NNM_MODES:
            problems.append(f"nnm_mode must be one of {NNM_MODES}, got {self.nnm_mode!r}")
        if self.init not in INITS:
            problems.append(f"init must be one of {INITS}, got {self.init!r}")
        if self.nnm_rate is not None and (self.cluster_bits is not None or self.prune):
            problems.append("nnm_rate cannot be combined with prune or cluster_bits on one layer")
        if self.prune and self.cluster_bits == 1:
            problems.append("a pruned layer needs cluster_bits >= 2 (entry 0 is reserved for zero)")
        if problems:
            raise RecipeError("invalid layer settings: " + "; ".join(problems))

    @property
    def compresses(self) -> bool:
        """True when these settings change how the layer's weights are stored."""
        return not self.skip and bool(self.prune or self.cluster_bits or self.nnm_rate or self.fp16)


_FIELDS = {f.name for f in dataclasses.fields(LayerSettings)}


@dataclass(frozen=True)
class Recipe:
    """Which settings apply to which layer: ``default`` for all, then ``layers`` entries
    ``(shell pattern, {setting: value})`` matched on node or weight names, in order."""
    default: LayerSettings = field(default_factory=LayerSettings)
    layers: tuple[tuple[str, dict[str, Any]], ...] = ()
    global_prune: float | None = None
    min_params: int = 0  # layers with fewer weights stay dense (their overhead outweighs the gain)

    def settings_for(self, *names: str) -> LayerSettings:
        """The settings of a layer known by ``names`` (node and weight name): the defaults, then
        every ``layers`` entry whose pattern matches one of them, in order."""
        settings = dataclasses.asdict(self.default)
        for pattern, overrides in self.layers:
            if any(fnmatch.fnmatchcase(n, pattern) for n in names if n):
                settings.update(overrides)
        return LayerSettings(**settings)

    def to_dict(self) -> dict[str, Any]:
        """The recipe as a mapping in the file format (only non-default settings)."""
        out: dict[str, Any] = {"default": _non_default(dataclasses.asdict(self.default))}
        if self.layers:
            out["layers"] = [{"match": p, **o} for p, o in self.layers]
        if self.global_prune is not None:
            out["global_prune"] = self.global_prune
        if self.min_params:
            out["min_params"] = self.min_params
        return out

    def to_json(self) -> str:
        """:meth:`to_dict` as JSON text (what a package stores)."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Recipe":
        """A recipe from a mapping in the file format; :class:`RecipeError` when it is malformed."""
        if not isinstance(data, dict):
            raise RecipeError("a recipe must be a mapping with 'default', 'layers', 'global_prune', 'min_params'")
        unknown = set(data) - {"default", "layers", "global_prune", "min_params"}
        if unknown:
            raise RecipeError(f"unknown recipe keys {sorted(unknown)}; allowed: default, layers, global_prune, min_params")
        default = LayerSettings(**_checked(data.get("default", {}), "default"))
        layers = []
        for i, entry in enumerate(data.get("layers", [])):
            if not isinstance(entry, dict) or not isinstance(entry.get("match"), str):
                raise RecipeError(f"layers[{i}] needs a 'match' pattern string")
            overrides = _checked({k: v for k, v in entry.items() if k != "match"}, f"layers[{i}]")
            LayerSettings(**{**dataclasses.asdict(default), **overrides})  # validate early
            layers.append((entry["match"], overrides))
        global_prune = data.get("global_prune")
        if global_prune is not None and not (isinstance(global_prune, (int, float)) and 0 <= global_prune < 1):
            raise RecipeError(f"global_prune must be in [0, 1), got {global_prune!r}")
        min_params = data.get("min_params", 0)
        if not isinstance(min_params, int) or min_params < 0:
            raise RecipeError(f"min_params must be a non-negative integer, got {min_params!r}")
        return cls(default, tuple(layers), global_prune, min_params)

    @classmethod
    def load(cls, path: str | Path) -> "Recipe":
        """A recipe from a JSON or YAML (.yaml/.yml) file."""
        path = Path(path)
        if not path.is_file():
            raise RecipeError(f"recipe file {str(path)!r} not found")
        text = path.read_text()
        try:
            if path.suffix.lower() in (".yaml", ".yml"):
                import yaml
                data = yaml.safe_load(text)
            else:
                data = json.loads(text)
        except Exception as exc:
            raise RecipeError(f"{path}: not valid {'YAML' if path.suffix in ('.yaml', '.yml') else 'JSON'} "
                              f"({str(exc).splitlines()[0]})") from None
        return cls.from_dict(data)


def _checked(mapping: Any, where: str) -> dict[str, Any]:
    if not isinstance(mapping, dict):
        raise RecipeError(f"{where} must be a mapping of settings")
    unknown = set(mapping) - _FIELDS
    if unknown:
        raise RecipeError(f"{where}: unknown settings {sorted(unknown)}; allowed: {', '.join(sorted(_FIELDS))}")
    return dict(mapping)


def _non_default(settings: dict[str, Any]) -> dict[str, Any]:
    defaults = dataclasses.asdict(LayerSettings())
    return {k: v for k, v in settings.items() if v != defaults[k]}
