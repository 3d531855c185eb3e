"""What both FlashInfer NVLink candidates share: a torch.distributed comm backend and error wording.

FlashInfer's ``MnnvlMemory`` exchanges memory handles through a ``CommBackend`` (MPI by default). Like
vLLM's ``CustomCommunicator`` we hand it the trial's gloo group: object all-gather / broadcast / barrier,
and ``Split`` returning itself (a pure expert-parallel world has one group). On an H100/H200 HGX node
without an IMEX fabric, FlashInfer falls back to POSIX file-descriptor handles exchanged over Unix
sockets; all ranks must be on one host.

Multicast: these candidates only use ``MnnvlMemory`` (unicast peer mappings). hwtune never creates
``SymmDeviceMemory`` or ``McastGPUBuffer`` (the NVLink-multicast objects behind FlashInfer's MNNVL
all-reduce), and every rank runs with ``NCCL_NVLS_ENABLE=0``, ``TORCH_SYMM_MEM_DISABLE_MULTICAST=1`` and
``NVSHMEM_DISABLE_NVLS=1``.
"""

from __future__ import annotations

from typing import Any

import torch.distributed as dist

from hwtune.probes.all2all.candidates.base import RankContext
from hwtune.probes.contract import Unsupported


class TorchGroupComm:
    """FlashInfer ``CommBackend`` over a torch.distributed (gloo) group, structurally typed.

    Its methods mimic the mpi4py communicator interface FlashInfer expects from its default MPI backend
    (``Get_rank``, ``Get_size``, ``allgather``, ``bcast``, ``barrier``, ``Split``), hence the capitalised names:
    object collectives on the group, ``bcast``'s root a rank within the group, and ``Split`` returning this
    communicator itself, since a pure expert-parallel world has one group.
    """

    def __init__(self, group: Any) -> None:
        self._group = group

    def Get_rank(self) -> int:
        return dist.get_rank(self._group)

    def Get_size(self) -> int:
        return dist.get_world_size(self._group)

    def allgather(self, data: Any) -> tuple[Any, ...]:
        out: list[Any] = [None] * self.Get_size()
        dist.all_gather_object(out, data, group=self._group)
        return tuple(out)

    def bcast(self, data: Any, root: int) -> Any:
        obj = [data]
        dist.broadcast_object_list(obj, src=dist.get_global_rank(self._group, root), group=self._group)
        return obj[0]

    def barrier(self) -> None:
        dist.barrier(group=self._group)

    def Split(self, color: int, key: int) -> Any:  # one EP group: itself
        return self


def require_cuda(ctx: RankContext, name: str) -> None:
    """Raise Unsupported on a CPU trial: FlashInfer's NVLink kernels exist only for NVIDIA GPUs."""
    if not ctx.is_cuda:
        raise Unsupported(f"{name} runs on NVIDIA GPUs only (FlashInfer NVLink kernels); this trial runs on the CPU.")


def flashinfer_reason(what: str, exc: BaseException) -> Unsupported:
    """FlashInfer's own words for why it refused, as the ``unsupported`` reason."""
    text = str(exc).strip() or type(exc).__name__
    return Unsupported(f"FlashInfer {what} failed: {type(exc).__name__}: {text}")


def pad_to_16_bytes(t: Any) -> Any:
    """Right-pad a 2-D tensor's rows with zeros to a multiple of 16 bytes (FlashInfer's row alignment)."""
    import torch

    row = t.shape[1] * t.element_size()
    if row % 16 == 0:
        return t
    extra = (16 - row % 16) // t.element_size()
    return torch.cat([t, torch.zeros((t.shape[0], extra), dtype=t.dtype, device=t.device)], dim=1)
