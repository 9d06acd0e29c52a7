"""The graph IR: named tensors, nodes in topological order, static shapes and dtypes.

A :class:`Graph` is what every stage shares: the ONNX importer builds it, passes rewrite it,
compression annotates it, the package stores it and backends execute it. Constants are numpy
arrays held by their :class:`Tensor`; by convention they are never mutated in place, so copies of
a graph share them.
"""
from __future__ import annotations

import copy
import itertools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Iterator

import numpy as np

from .errors import UnsupportedModelError

if TYPE_CHECKING:
    from .compress.encodings import Encoding


class Tensor:
    """A named tensor. Constants hold either a dense array or an encoding (compressed storage)
    that decodes, on first use of ``data``, to exactly the values the model computes with."""

    __slots__ = ("name", "shape", "dtype", "_data", "encoding")

    def __init__(self, name: str, shape: tuple[int, ...], dtype: Any, data: np.ndarray | None = None,
                 encoding: "Encoding | None" = None) -> None:
        self.name = name
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self._data = data
        self.encoding = encoding

    @classmethod
    def trusted(cls, name: str, shape: tuple[int, ...], dtype: np.dtype, data: np.ndarray | None = None,
                encoding: "Encoding | None" = None) -> "Tensor":
        """A Tensor from values already normalised (a tuple of ints, a numpy dtype), skipping the
        conversions: the package reader builds hundreds of them while a model opens."""
        tensor = cls.__new__(cls)
        tensor.name, tensor.shape, tensor.dtype, tensor._data, tensor.encoding = name, shape, dtype, data, encoding
        return tensor

    @property
    def data(self) -> np.ndarray | None:
        """The dense value (an encoding is decoded on first use and kept); None for activations."""
        if self._data is None and self.encoding is not None:
            self._data = self.encoding.decode()
        return self._data

    @data.setter
    def data(self, value: np.ndarray | None) -> None:
        self._data, self.encoding = value, None

    @property
    def is_constant(self) -> bool:
        """True for weights and other constants (dense or encoded), False for run-time tensors."""
        return self._data is not None or self.encoding is not None

    @property
    def size(self) -> int:
        """Number of elements (exact: math.prod of Python ints cannot wrap as numpy's int64 would)."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of the dense value (what an uncompressed runtime holds)."""
        return self.size * np.dtype(self.dtype).itemsize

    @property
    def stored_nbytes(self) -> int:
        """Bytes as stored: the encoding's size when compressed."""
        return self.encoding.nbytes if self.encoding is not None else self.nbytes

    def copy(self) -> "Tensor":
        """A new Tensor sharing this one's (never mutated) value or encoding."""
        return Tensor(self.name, self.shape, self.dtype, self._data, self.encoding)

    def __repr__(self) -> str:
        kind = f", {self.encoding.kind}" if self.encoding is not None else (
            ", const" if self._data is not None else "")
        return f"Tensor({self.name!r}, {self.shape}, {self.dtype}{kind})"


@dataclass
class Node:
    """One operation: ``op`` (an ONNX op type in the IR's canonical form), its input and output
    tensor names and its attributes (``fused_activation`` holds an activation the op applies)."""
    op: str
    name: str
    inputs: list[str]  # "" marks an omitted optional input
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)

    def input(self, i: int) -> str | None:
        """Name of input ``i`` or None when it is absent or omitted."""
        return self.inputs[i] if i < len(self.inputs) and self.inputs[i] else None


class Graph:
    """A model: named tensors, nodes in topological order, graph inputs and outputs, metadata.

    Build one by hand with :meth:`add_input`, :meth:`add_constant` and :meth:`add_node` (then append
    output names to ``outputs``), or get one from ``Session(model).graph``; a Graph can be run with
    ``Session(graph)``, packed with ``edgesdk.compress.pack_model`` or exported with
    ``edgesdk.export.export_onnx``."""

    def __init__(self, name: str = "graph") -> None:
        self.name = name
        self.tensors: dict[str, Tensor] = {}
        self.nodes: list[Node] = []
        self.inputs: list[str] = []
        self.outputs: list[str] = []
        self.metadata: dict[str, Any] = {}

    # -- construction -------------------------------------------------------------------------
    def add_input(self, name: str, shape: Iterable[int], dtype: Any = np.float32) -> Tensor:
        """Declare a graph input of fixed ``shape``."""
        tensor = self.add_tensor(name, shape, dtype)
        self.inputs.append(name)
        return tensor

    def add_tensor(self, name: str, shape: Iterable[int], dtype: Any) -> Tensor:
        """Declare a run-time tensor (a node output) of fixed ``shape`` and ``dtype``."""
        tensor = Tensor(name, tuple(int(d) for d in shape), np.dtype(dtype))
        self.tensors[name] = tensor
        return tensor

    def add_constant(self, name: str, value: np.ndarray) -> Tensor:
        """Add a constant (a weight); ``value`` is kept, not copied, and must not be mutated later."""
        value = np.asarray(value)
        tensor = Tensor(name, tuple(value.shape), value.dtype, value)
        self.tensors[name] = tensor
        return tensor

    def add_encoded(self, name: str, encoding: "Encoding") -> Tensor:
        """A float32 constant stored compressed; ``data`` decodes it on first use."""
        tensor = Tensor(name, encoding.shape, np.float32, encoding=encoding)
        self.tensors[name] = tensor
        return tensor

    def add_node(self, op: str, inputs: list[str], outputs: list[str], name: str | None = None,
                 **attrs: Any) -> Node:
        """Append a node (``name`` defaults to a unique one from ``op``); shapes are inferred when a
        Session loads the graph."""
        node = Node(op, name or self.unique_name(op), list(inputs), list(outputs), dict(attrs))
        self.nodes.append(node)
        return node

    def unique_name(self, base: str) -> str:
        """``base``, or ``base_1``, ``base_2``... whichever no node or tensor uses yet."""
        taken = {n.name for n in self.nodes} | set(self.tensors)
        if base not in taken:
            return base
        return next(f"{base}_{i}" for i in itertools.count(1) if f"{base}_{i}" not in taken)

    # -- queries ------------------------------------------------------------------------------
    def const(self, name: str | None) -> np.ndarray | None:
        """The constant value of tensor ``name``, or None if it is absent or not constant."""
        if not name:
            return None
        tensor = self.tensors.get(name)
        return None if tensor is None else tensor.data

    def producers(self) -> dict[str, Node]:
        """Tensor name -> the node that writes it."""
        return {out: node for node in self.nodes for out in node.outputs if out}

    def consumers(self) -> dict[str, list[Node]]:
        """Tensor name -> the nodes that read it, in node order."""
        users: dict[str, list[Node]] = {}
        for node in self.nodes:
            for name in node.inputs:
                if name:
                    users.setdefault(name, []).append(node)
        return users

    def constants(self) -> Iterator[Tensor]:
        """Every constant tensor (dense or encoded)."""
        return (t for t in self.tensors.values() if t.is_constant)

    # -- maintenance --------------------------------------------------------------------------
    def copy(self) -> "Graph":
        """A structural copy: nodes, tensors and attributes are new; constant arrays are shared."""
        clone = Graph(self.name)
        clone.tensors = {k: t.copy() for k, t in self.tensors.items()}
        clone.nodes = [Node(n.op, n.name, list(n.inputs), list(n.outputs), copy.copy(n.attrs))
                       for n in self.nodes]
        clone.inputs = list(self.inputs)
        clone.outputs = list(self.outputs)
        clone.metadata = copy.deepcopy(self.metadata)
        return clone

    def rename_tensor(self, old: str, new: str) -> None:
        """Make every reference to ``old`` point to ``new`` (which must already exist)."""
        for node in self.nodes:
            node.inputs = [new if n == old else n for n in node.inputs]
            node.outputs = [new if n == old else n for n in node.outputs]
        self.outputs = [new if n == old else n for n in self.outputs]

    def toposort(self) -> None:
        """Order nodes so that every input is produced before it is used (stable for sorted input)."""
        available = {n for n, t in self.tensors.items() if t.is_constant} | set(self.inputs)
        pending, ordered = list(self.nodes), []
        while pending:
            ready = [n for n in pending if all(i in available for i in n.inputs if i)]
            if not ready:
                missing = sorted({i for n in pending for i in n.inputs if i and i not in available})
                raise UnsupportedModelError(
                    f"graph {self.name!r} has a cycle or undefined tensors ({', '.join(missing[:5])})")
            ready_ids = {id(n) for n in ready}
            ordered.extend(ready)
            pending = [n for n in pending if id(n) not in ready_ids]
            available.update(o for n in ready for o in n.outputs if o)
        self.nodes = ordered

    def remove_unused_tensors(self) -> None:
        """Drop tensors no node, input or output refers to."""
        used = set(self.inputs) | set(self.outputs)
        for node in self.nodes:
            used.update(n for n in node.inputs + node.outputs if n)
        self.tensors = {k: v for k, v in self.tensors.items() if k in used}

    def __repr__(self) -> str:
        return (f"Graph({self.name!r}, {len(self.nodes)} nodes, inputs={self.inputs}, "
                f"outputs={self.outputs})")
