"""The op registry: everything the SDK knows about one op, in one record.

An :class:`OpSpec` holds, for one op type, the parts every stage needs: the ONNX importer (raw
node -> the IR's canonical node), the shape rule, the numpy reference kernel (the oracle, and
what constant folding runs), the cost (multiply-accumulates), the torch lowering (fine-tuning),
the attribute signature packages are validated against, and the size/attribute check that runs
before anything is allocated. Each family module of ``edgesdk.ops`` fills the records of its ops
with the decorators of :func:`op`; backends lower the same op types in files of the same family
name (``backends/cpu/lower/<family>.py``, ``backends/opencl/lower/<family>.py``).

The registry imports only numpy: a Session opening a package needs the shape rules and the
signatures, never onnx or torch (those are imported inside the importers and torch lowerings).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

if TYPE_CHECKING:
    from ..graph import Graph, Node

Shape = tuple[int, ...]
Importer = Callable[..., "Node | None"]          # (importer, name, inputs, outputs, attrs)
ShapeRule = Callable[["Node", list[Shape]], list[Shape]]
Kernel = Callable[..., "np.ndarray | tuple[np.ndarray, ...]"]  # (node, *inputs)
MacsRule = Callable[["Node", "Graph"], int]
BytesRule = Callable[["Node", "Graph"], int]
TorchFn = Callable[..., Any]                     # (module, node, *torch inputs)
NodeCheck = Callable[..., None]                  # (node, input shapes, dtype, SizeLimit)
DtypeRule = Callable[["Node", list[np.dtype]], list[np.dtype]]


# -- attribute kinds (what a package may store for each attribute) ------------------------------
@dataclass(frozen=True)
class Kind:
    """A predicate on an attribute value and the words that describe it in an error."""
    test: Callable[[Any], bool]
    words: str


def _is_int(v: Any) -> bool:
    return type(v) is int  # not bool: True is an int to Python, not to every kernel


_INT_ONLY = {int}
INT = Kind(_is_int, "an int")
FLOAT = Kind(lambda v: type(v) in (float, int), "a number")  # kernels take float(v)
BOOL = Kind(lambda v: type(v) is bool or (type(v) is int and v in (0, 1)), "a bool")
STRING = Kind(lambda v: type(v) is str, "a string")


def ints(length: int | None = None) -> Kind:
    """A tuple or list of ints, of ``length`` when given."""
    return Kind(lambda v: type(v) in (tuple, list) and set(map(type, v)) <= _INT_ONLY
                and (length is None or len(v) == length),
                f"{length} ints" if length is not None else "a list of ints")


def floats() -> Kind:
    """A tuple or list of numbers."""
    return Kind(lambda v: type(v) in (tuple, list) and all(type(x) in (float, int) for x in v),
                "a list of numbers")


@dataclass(frozen=True)
class Signature:
    """A runtime op as the importer builds it: ``required`` inputs, then up to ``optional``
    more (omitted ones are ""), ``outputs`` outputs (any number >= 1 when variadic_outputs), and
    the attributes every kernel reads."""
    required: int
    optional: int = 0
    attrs: dict[str, Kind] = field(default_factory=dict)
    variadic: bool = False  # Concat: any number (>= required) of inputs
    outputs: int = 1
    variadic_outputs: bool = False  # Split
    omittable: tuple[int, ...] = ()  # required positions that may still be "" (QGemm's bias C)


# -- the record ---------------------------------------------------------------------------------
@dataclass
class OpSpec:
    """One op type. ``shape`` None means the op only ever runs on constants (it is folded at
    import); ``importer`` None means no ONNX node imports to it directly."""
    name: str
    family: str
    domain: str = ""  # the ONNX domain it imports from ("" = the default one, or com.microsoft)
    importer: Importer | None = None
    shape: ShapeRule | None = None
    reference: Kernel | None = None
    macs: MacsRule | None = None
    bytes_moved: BytesRule | None = None  # memory traffic; default: runtime.cost.default_bytes_moved
    torch: TorchFn | None = None
    check: NodeCheck | None = None
    signature: Signature | None = None
    dtypes: DtypeRule | None = None  # output dtypes; default: the first input's for every output
    fusable: bool = False    # may carry a fused_activation (every backend applies it)
    fp32_only: bool = False  # output kept float32 in fp16 mode (reductions that need the range)
    imports_as: str = ""     # for the README: what the importer turns this op into, if not itself
    note: str = ""           # for the README: limits of the support

    @property
    def runs(self) -> bool:
        """True when the op can run on run-time tensors (it has a shape rule and a kernel)."""
        return self.shape is not None and self.reference is not None


OPS: dict[str, OpSpec] = {}


class op:
    """Declare op types of a family and register their parts with decorators::

        conv = op("Conv", family="conv", signature=..., fusable=True)

        @conv.importer
        def _import(imp, name, inputs, outputs, attrs): ...

    Several op types may share one declaration (``op("Add", "Sub", family=...)``): each part
    then serves them all. Declaring an op twice, or a part twice, is a programming error."""

    def __init__(self, *names: str, family: str, **fields: Any) -> None:
        self.names = names
        for name in names:
            if name in OPS:
                raise AssertionError(f"op {name} is declared twice")
            OPS[name] = OpSpec(name, family, **fields)

    @classmethod
    def shared(cls, *names: str) -> "op":
        """A handle on ops declared already, to register the parts they share."""
        handle = cls.__new__(cls)
        handle.names = names
        missing = [n for n in names if n not in OPS]
        if missing:
            raise AssertionError(f"ops {missing} are not declared")
        return handle

    def _set(self, part: str, fn: Callable) -> Callable:
        for name in self.names:
            if getattr(OPS[name], part) is not None:
                raise AssertionError(f"op {name} has two {part} parts")
            setattr(OPS[name], part, fn)
        return fn

    def importer(self, fn: Importer) -> Importer:
        return self._set("importer", fn)

    def shape(self, fn: ShapeRule) -> ShapeRule:
        return self._set("shape", fn)

    def reference(self, fn: Kernel) -> Kernel:
        return self._set("reference", fn)

    def macs(self, fn: MacsRule) -> MacsRule:
        return self._set("macs", fn)

    def bytes_moved(self, fn: BytesRule) -> BytesRule:
        return self._set("bytes_moved", fn)

    def torch(self, fn: TorchFn) -> TorchFn:
        return self._set("torch", fn)

    def check(self, fn: NodeCheck) -> NodeCheck:
        return self._set("check", fn)

    def dtypes(self, fn: DtypeRule) -> DtypeRule:
        return self._set("dtypes", fn)


def evaluate(node: "Node", inputs: list[np.ndarray | None]) -> tuple[np.ndarray, ...]:
    """Run one node on its reference kernel, fused activation included. NaN and infinities give
    their IEEE results silently, as in ONNX Runtime (no numpy "invalid value" warnings)."""
    spec = OPS.get(node.op)
    if spec is None or spec.reference is None:
        raise KeyError(f"no reference kernel for op {node.op!r}")
    with np.errstate(all="ignore"):
        result = spec.reference(node, *inputs)
        outputs = result if isinstance(result, tuple) else (result,)
        fused = node.attrs.get("fused_activation")
        if fused is not None:
            outputs = (fused.apply(outputs[0]),) + outputs[1:]
    return outputs
