"""FLASHINFER_FA_MLA's non-absorbed prefill tactics (``mla_prefill_base``), API of flashinfer 0.6.18:

- ``mha-fa2`` / ``mha-fa3`` / ``mha-cutlass``: ``flashinfer.BatchPrefillWithRaggedKVCacheWrapper(workspace, "NHD",
  backend=...)``, ``plan(qo_indptr, kv_indptr, heads, heads, head_dim_qk=192, head_dim_vo=128, causal=True,
  sm_scale=...)`` (FlashInfer's causal mask is aligned to the end of each request's KV), ``run(q, k, v, out=, lse=,
  return_lse=True)``; the LSE is base 2 (vLLM converts it with ``log2_lse_to_ln``), converted outside the timed call.
  SGLang's flashinfer MLA backend runs this wrapper (``backend="auto"``: fa3 on SM 9.0) for an extend batch without
  a cached prefix; vLLM 0.33.0's FLASHINFER MLA prefill backend runs it with ``backend="cutlass"`` on SM 10.x
  (``v1/attention/backends/mla/prefill/flashinfer.py``).
- ``mha-cudnn``: ``flashinfer.cudnn.cudnn_batch_prefill_with_kv_cache`` on the ragged (non-paged) q/K/V, called
  directly: the ragged wrapper's cudnn route allocates its LSE as ``[tokens, heads]`` where the cuDNN function wants
  ``[batch, max_query_len, heads]`` (flashinfer 0.6.18 prefill.py ``run`` vs cudnn/prefill.py), so it cannot return
  the LSE. Its docstring: "head_dim_qk must be 128 or 192, and head_dim_vo must be 128"; offsets in elements;
  ``causal`` is cuDNN's bottom-right mask; the LSE is natural log, padded per request, gathered outside the timed call.
"""

from __future__ import annotations

from typing import Any

import torch

from hwtune.probes.attention.candidates.base import LN2, Unsupported
from hwtune.probes.attention.candidates.flashinfer import padded_lse
from hwtune.probes.attention.candidates.mla_prefill_base import MlaPrefillInputs, MlaPrefillRunner

WORKSPACE_BYTES = 128 << 20
WRAPPER_TACTICS = {"mha-fa2": "fa2", "mha-fa3": "fa3", "mha-cutlass": "cutlass"}
TACTICS = (*WRAPPER_TACTICS, "mha-cudnn")


def _check_dims(inputs: MlaPrefillInputs) -> None:
    dqk, dvo = inputs.q.shape[-1], inputs.v.shape[-1]
    if (dqk, dvo) != (192, 128):
        raise Unsupported(
            f"FlashInfer's MLA prefill kernels are built for head_dim_qk 192 / head_dim_vo 128 (DeepSeek), not "
            f"{dqk} / {dvo}"
        )


class FlashInferMlaPrefillRunner(MlaPrefillRunner):
    """One ragged wrapper (``backend=`` the tactic's), re-planned per batch; returns the LSE."""

    returns_lse = True

    def __init__(self, tactic: str) -> None:
        super().__init__()
        self.tactic = tactic
        self.wrapper: Any = None

    def lse_natural(self) -> torch.Tensor | None:
        return None if self.lse is None else self.lse * LN2

    def plan(self, inputs: MlaPrefillInputs) -> None:
        """Plan the ragged prefill wrapper for this batch (qk 192, vo 128); not timed."""
        _check_dims(inputs)
        import flashinfer

        heads = inputs.q.shape[1]
        if self.wrapper is None:
            self.workspace = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=inputs.q.device)
            self.wrapper = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(
                self.workspace, "NHD", backend=WRAPPER_TACTICS[self.tactic]
            )
        self.wrapper.plan(
            inputs.qo_indptr,
            inputs.kv_indptr,
            heads,
            heads,
            inputs.q.shape[-1],
            head_dim_vo=inputs.v.shape[-1],
            causal=True,
            sm_scale=self.scale,
            q_data_type=inputs.q.dtype,
            kv_data_type=inputs.k.dtype,
            o_data_type=inputs.q.dtype,
        )

    def run(self) -> None:
        x = self.inputs
        assert x is not None
        self.wrapper.run(x.q, x.k, x.v, out=self.out, lse=self.lse, return_lse=True)


class CudnnMlaPrefillRunner(MlaPrefillRunner):
    """``cudnn_batch_prefill_with_kv_cache`` on the ragged tensors; its padded natural-log LSE gathered per token."""

    returns_lse = True

    def __init__(self) -> None:
        super().__init__()
        self.tactic = "mha-cudnn"
        self.workspace: torch.Tensor | None = None

    def plan(self, inputs: MlaPrefillInputs) -> None:
        """Bind cuDNN's ragged prefill to this batch's tensors and lengths; not timed."""
        _check_dims(inputs)
        from flashinfer.cudnn import cudnn_batch_prefill_with_kv_cache

        self.fn = cudnn_batch_prefill_with_kv_cache
        dev, heads = inputs.q.device, inputs.q.shape[1]
        dqk, dvo = inputs.q.shape[-1], inputs.v.shape[-1]
        if self.workspace is None:
            self.workspace = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=dev)
        b = len(inputs.query_lens)
        self.seq_q = torch.tensor(inputs.query_lens, dtype=torch.int32, device=dev).view(b, 1, 1, 1)
        self.seq_kv = torch.tensor(inputs.kv_lens, dtype=torch.int32, device=dev).view(b, 1, 1, 1)
        qo, kv = inputs.qo_indptr, inputs.kv_indptr
        self.offsets = dict(
            batch_offsets_q=(qo * heads * dqk).int(),
            batch_offsets_o=(qo * heads * dvo).int(),
            batch_offsets_k=(kv * heads * dqk).int(),
            batch_offsets_v=(kv * heads * dvo).int(),
        )
        self.lse_padded, self.rows = padded_lse(inputs.query_lens, heads, dev)

    def lse_natural(self) -> torch.Tensor | None:
        return self.lse_padded[self.rows[0], self.rows[1]]

    def run(self) -> None:
        x = self.inputs
        assert x is not None
        self.fn(
            x.q,
            x.k,
            x.v,
            self.scale,
            self.workspace,
            max_token_per_sequence=x.max_query_len,
            max_sequence_kv=x.max_kv_len,
            actual_seq_lens_q=self.seq_q,
            actual_seq_lens_kv=self.seq_kv,
            causal=True,
            return_lse=True,
            out=self.out,
            lse=self.lse_padded,
            **self.offsets,
        )


def prefill_runner(tactic: str) -> MlaPrefillRunner:
    """The runner of one of FLASHINFER_FA_MLA's ``mha-*`` tactics."""
    if tactic == "mha-cudnn":
        return CudnnMlaPrefillRunner()
    if tactic in WRAPPER_TACTICS:
        return FlashInferMlaPrefillRunner(tactic)
    raise Unsupported(f"FLASHINFER_FA_MLA has no tactic {tactic!r}")
