"""HWTUNE_TORCH_MLA's non-absorbed prefill tactics (``mla_prefill_base``): PyTorch attention per request over the
up-projected context, q/K 192 wide, V 128 wide, causal aligned to the end.

- ``mha-eager``: matmul, masked float32 softmax with its LSE (natural log), matmul: the computation of vLLM 0.33.0's
  CPU MLA prefill backend (``v1/attention/backends/mla/prefill/cpu_sdpa.py`` ``CPUSDPAMLAPrefillBackend._ragged_sdpa``,
  dense per-request attention), in query-row chunks so a long chunk's scores stay bounded; runs on the CPU.
- ``mha-sdpa-math`` / ``-flash`` / ``-efficient`` / ``-cudnn``: ``F.scaled_dot_product_attention`` under
  ``sdpa_kernel`` with that kernel only. SDPA takes a value head size other than the query's (the math kernel always;
  the fused kernels per torch's own checks, which refuse at run time: recorded ``unsupported`` with torch's reason).
  SDPA's ``is_causal`` is aligned to the top-left, so a request with a cached prefix takes a boolean mask, which the
  flash kernel does not take (unsupported there). SDPA returns no LSE.
"""

from __future__ import annotations

import math
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from hwtune.probes.attention.candidates.base import Unsupported
from hwtune.probes.attention.candidates.mla_prefill_base import MlaPrefillInputs, MlaPrefillRunner

#: Score elements per chunk of query rows (float32): about 1 GiB.
_CHUNK_ELEMENTS = 1 << 28

SDPA_KERNELS = {
    "mha-sdpa-math": SDPBackend.MATH,
    "mha-sdpa-flash": SDPBackend.FLASH_ATTENTION,
    "mha-sdpa-efficient": SDPBackend.EFFICIENT_ATTENTION,
    "mha-sdpa-cudnn": SDPBackend.CUDNN_ATTENTION,
}
TACTICS = ("mha-eager", *SDPA_KERNELS)


def causal_mask(m: int, n: int, device: torch.device, offset: int = 0) -> torch.Tensor:
    """``[m, n]`` True where new token ``i`` of ``m`` may see key ``j`` of a context of ``n``: ``j <= n - m + i``."""
    return torch.arange(n, device=device)[None, :] <= torch.arange(n - m, n, device=device)[:, None] + offset


class TorchMlaPrefillRunner(MlaPrefillRunner):
    """``mha-eager`` (LSE) or one SDPA kernel (no LSE), a loop over requests in the timed call."""

    def __init__(self, tactic: str) -> None:
        if tactic not in TACTICS:
            raise Unsupported(f"HWTUNE_TORCH_MLA has no tactic {tactic!r}; its tactics: eager, {', '.join(TACTICS)}")
        self.tactic = tactic
        self.returns_lse = tactic == "mha-eager"
        super().__init__()
        self.mask_offset = 0  # 0: exact; faulty variants in tests move it

    def plan(self, inputs: MlaPrefillInputs) -> None:
        """Build each request's causal mask (aligned to the end of its context); not timed."""
        dev = inputs.q.device
        self.work = torch.float32 if dev.type == "cpu" else inputs.q.dtype
        self.masks: list[torch.Tensor | None] = []
        for m, n in zip(inputs.query_lens, inputs.kv_lens):
            if self.tactic != "mha-eager" and m == n and self.mask_offset == 0:
                self.masks.append(None)  # no prefix: SDPA's own (top-left) causal mask is the right one
            else:
                if self.tactic == "mha-sdpa-flash":
                    raise Unsupported("SDPA's flash kernel takes no attention mask; a cached prefix needs one")
                self.masks.append(causal_mask(m, n, dev, self.mask_offset))

    def run(self) -> None:
        x = self.inputs
        assert x is not None and self.out is not None
        q0 = k0 = 0
        for r, (m, n) in enumerate(zip(x.query_lens, x.kv_lens)):
            q = x.q[q0 : q0 + m].transpose(0, 1)  # [heads, m, 192]
            k = x.k[k0 : k0 + n].transpose(0, 1)
            v = x.v[k0 : k0 + n].transpose(0, 1)  # [heads, n, 128]
            if self.tactic == "mha-eager":
                self._eager(q, k, v, self.masks[r], q0)
            else:
                self._sdpa(q, k, v, self.masks[r], q0)
            q0, k0 = q0 + m, k0 + n

    def _eager(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, q0: int) -> None:
        assert self.out is not None and self.lse is not None and mask is not None
        heads, m, n = q.shape[0], q.shape[1], k.shape[1]
        q, k, v = q.to(self.work), k.to(self.work), v.to(self.work)
        chunk = max(1, _CHUNK_ELEMENTS // max(1, heads * n))
        for c0 in range(0, m, chunk):
            c1 = min(m, c0 + chunk)
            scores = torch.matmul(q[:, c0:c1], k.transpose(1, 2)).float() * self.scale  # [heads, c, n]
            scores.masked_fill_(~mask[c0:c1], -math.inf)
            lse = torch.logsumexp(scores, dim=-1)  # [heads, c]
            probs = torch.exp(scores - lse[..., None]).to(self.work)
            self.out[q0 + c0 : q0 + c1] = torch.matmul(probs, v).transpose(0, 1)
            self.lse[q0 + c0 : q0 + c1] = lse.transpose(0, 1)

    def _sdpa(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, q0: int) -> None:
        assert self.out is not None
        try:
            with sdpa_kernel(SDPA_KERNELS[self.tactic]), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # torch warns once per refused kernel; the error says why
                o = F.scaled_dot_product_attention(
                    q[None], k[None], v[None], attn_mask=mask, is_causal=mask is None, scale=self.scale
                )
        except RuntimeError as exc:
            if "No available kernel" in str(exc) or "No viable backend" in str(exc):
                msg = str(exc).splitlines()[0]
                raise Unsupported(f"SDPA {self.tactic} refused q/k 192, v 128 here: {msg}") from None
            raise
        self.out[q0 : q0 + q.shape[1]] = o[0].transpose(0, 1)
