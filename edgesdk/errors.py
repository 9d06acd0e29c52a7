"""Typed exceptions. Every message is one line naming the problem and the way out.

The CLI prints ``edgesdk: error: <message>`` and exits 2 for any :class:`EdgeSDKError`.
"""
from __future__ import annotations


class EdgeSDKError(Exception):
    """Base class of every error edgesdk raises on bad input or an unusable environment."""


class ModelLoadError(EdgeSDKError):
    """The model file is missing, unreadable, corrupt or not a model this SDK reads."""


class UnsupportedModelError(EdgeSDKError):
    """The model is valid but uses a feature this SDK does not run (dtype, rank, attribute...)."""


class ModelTooLargeError(UnsupportedModelError):
    """A tensor (input, activation, folded constant, scratch), an attribute or the peak memory of
    the model is larger than this machine holds or than the kernels can index. Raised from the
    shapes alone, before anything of that size is allocated. A kind of UnsupportedModelError: the
    model is valid, this SDK does not run it at this size here (so ``backend="auto"`` and callers
    that catch UnsupportedModelError treat it alike). ``tensor``, ``nbytes`` and ``limit`` say what
    was refused (None where the refusal is of an attribute, not of a size in bytes)."""

    def __init__(self, message: str, *, tensor: str | None = None, nbytes: int | None = None,
                 limit: int | None = None) -> None:
        super().__init__(message)
        self.tensor = tensor
        self.nbytes = nbytes
        self.limit = limit


class UnsupportedOperatorError(UnsupportedModelError):
    """The model contains an operator type this SDK does not implement."""

    def __init__(self, op_type: str, node_name: str, supported: list[str] | tuple[str, ...]):
        self.op_type = op_type
        self.node_name = node_name
        self.supported = sorted(supported)
        super().__init__(
            f"unsupported operator {op_type!r} in node {node_name!r}; supported operators: "
            f"{', '.join(self.supported)}"
        )


class BackendUnavailableError(EdgeSDKError):
    """The requested backend is unknown or cannot run on this machine."""


class InputError(EdgeSDKError, ValueError):
    """A feed passed to Session.run has the wrong name, shape or dtype."""


class MemoryBudgetError(InputError):
    """A memory budget (``Session(memory_budget=...)``, ``--memory-budget``) is not a positive
    whole number of bytes, or is below what the smallest schedule of the model needs. ``budget``
    and ``minimum`` (bytes; None where not known) say what was asked and what would do."""

    def __init__(self, message: str, *, budget: object = None, minimum: int | None = None) -> None:
        super().__init__(message)
        self.budget = budget
        self.minimum = minimum


class SessionClosedError(EdgeSDKError, RuntimeError):
    """The Session (or an io binding of it) was closed; create a new one to run again."""


class DatasetError(EdgeSDKError):
    """An evaluation dataset is missing, malformed or does not fit the model."""


class PackageError(EdgeSDKError):
    """An .edgepkg package cannot be written, or is truncated, corrupt or of another format version."""


class RemoteError(EdgeSDKError):
    """Working with a board over SSH failed (``edgesdk remote``). The CLI prefixes the target."""


class TargetConfigError(RemoteError):
    """A target (inventory entry, ``ssh://`` URL or ~/.ssh/config entry) is missing or invalid."""


class HostKeyError(RemoteError):
    """The board's host key is unknown or differs from known_hosts; nothing was sent to it."""


class RemoteConnectionError(RemoteError):
    """The board cannot be reached: refused, unresolvable, timed out, or the connection dropped."""


class AuthenticationError(RemoteError):
    """The board refused every key offered (identity file, ssh-agent, default keys)."""


class RemoteCommandError(RemoteError):
    """A command on the board failed, timed out or was interrupted."""


class TransferError(RemoteError):
    """A file could not be copied to or from the board (no space, read-only, connection cut)."""


class ProvisionError(RemoteError):
    """The SDK could not be installed on the board (no python, no venv/pip, pip failed)."""
