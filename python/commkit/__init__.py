"""commkit as a torch.distributed backend.

    import commkit                                   # registers the "commkit" backend
    torch.distributed.init_process_group("commkit")  # instead of "gloo" / "nccl"

CPU tensors run on commkit's host engine (shared memory within a host, UCX between hosts), CUDA
tensors on commkit's NCCL backend. Errors carry commkit's diagnosis: a collective that ranks called
differently raises torch.distributed.DistBackendError listing every rank's call; a rank that died or
never arrived is named. See docs/pytorch.md.
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from . import _signals

with _signals.preserved():  # the libraries _C links must not take over SIGTERM/SIGSEGV/... (see _signals)
    from . import _C

__all__ = [
    "BACKEND_NAME",
    "__version__",
    "version",
    "backends",
    "backend_info",
    "set_host_backend",
    "topology_advice",
]

BACKEND_NAME = "commkit"
__version__ = _C.version()

# The commkit backend that runs CPU tensors in groups created from now on; COMMKIT_TORCH_HOST_BACKEND
# sets the initial choice ("host" or "mpi").
_host_backend = os.environ.get("COMMKIT_TORCH_HOST_BACKEND", "host")

# Inside a torch process commkit's gloo backend would run the system libgloo, whose internal calls
# resolve to the (other) Gloo that libtorch_cpu exports, and crash; "auto" may pick gloo.
_REFUSED = {
    "gloo": "commkit's gloo backend cannot run inside PyTorch (libtorch exports its own Gloo, which the "
            "system libgloo would call into); use torch's own backend=\"gloo\" or commkit's \"host\"",
    "auto": "pass \"host\" (or \"mpi\") explicitly; \"auto\" may pick commkit's gloo backend, which cannot run "
            "inside PyTorch",
}


def _check_host_backend(name: str) -> None:
    if name in _REFUSED:
        raise ValueError(f"commkit: host backend {name!r}: {_REFUSED[name]}")
    known = {b["name"] for b in backends() if b["memory"] == "host"}
    if name not in known:
        raise ValueError(f"commkit: unknown host backend {name!r}; known: {sorted(known - set(_REFUSED))}")


def version() -> str:
    """commkit's version."""
    return _C.version()


def backends() -> list[dict[str, Any]]:
    """The commkit backends this build has: name, available, reason (when not), memory."""
    return _C.backends()


def set_host_backend(name: str) -> None:
    """Chooses the commkit backend for CPU tensors of process groups created after this call."""
    global _host_backend
    _check_host_backend(name)
    _host_backend = name


def _create(store, rank: int, size: int, timeout: timedelta):
    _check_host_backend(_host_backend)
    return _C._create_backend(store, rank, size, timeout.total_seconds(), _host_backend, "nccl")


def _commkit_backend(group=None, device: str = "cpu"):
    pg = group if group is not None else dist.group.WORLD
    if pg is None:
        raise RuntimeError("commkit: torch.distributed is not initialized")
    backend = pg._get_backend(torch.device(device))
    if not isinstance(backend, _C.CommkitBackend):
        raise RuntimeError(f"commkit: the group's {device} backend is {type(backend).__name__}, not commkit")
    return backend


def backend_info(group=None) -> dict[str, Any]:
    """Which commkit backends run a torch process group's tensors.

    {"backend": "commkit", "version": ..., "cpu": "host", "cuda": "nccl" (or None before the first
    CUDA operation)}
    """
    b = _commkit_backend(group)
    return {
        "backend": BACKEND_NAME,
        "version": version(),
        "cpu": b.host_backend,
        "cuda": b.device_backend or None,
    }


def topology_advice(master_addr: str | None = None) -> dict[str, Any]:
    """commkit's environment advice for this machine (NCCL_*/FI_* settings with reasons) as a dict:
    {"settings": [{variable, value, reason, user_set, user_value, conflict}], "findings": [...]}."""
    return json.loads(_C._topology_advice_json(master_addr or ""))


def _glue_bench(group=None, iters: int = 10000, count: int = 2) -> dict[str, float]:
    """Per-call microseconds of a float32 allreduce of `count` elements (8 bytes by default) through
    the backend vs on commkit directly."""
    return _C._glue_bench(_commkit_backend(group), iters, count)


def _work_exception(self) -> BaseException | None:
    """The exception the operation failed with (torch.distributed.DistBackendError carrying commkit's
    diagnosis, ...), or None when it succeeded or is still running.

    torch 2.11's own Work.exception() cannot convert the C++ exception and raises TypeError; commkit's
    Works (a subclass of torch.distributed.Work) answer it here."""
    try:
        self._raise_exception()
    except Exception as e:  # noqa: BLE001  the operation's own error, returned rather than raised
        return e
    return None


_C.Work.exception = _work_exception

if BACKEND_NAME.upper() not in dist.Backend._plugins:
    dist.Backend.register_backend(BACKEND_NAME, _create, devices=["cpu", "cuda"])
