"""MoE all2all backends, named as vLLM's ``--all2all-backend`` names them (plus nccl_alltoallv).

Static orders: vLLM's default is allgather_reducescatter (vllm/config/parallel.py), the choice that runs
everywhere. Where specialised kernels are installed and valid they are preferred as vLLM's expert-parallel
deployment guide recommends: DeepEP low-latency (decode) then high-throughput (prefill) on Hopper; the
FlashInfer NVLink kernels on Blackwell (NVL72 MNNVL systems), which vLLM makes the default on GB200/GB300.

Facts from vLLM's ``vllm/distributed/device_communicators/all2all.py``, ``vllm/config/parallel.py`` and
``vllm/model_executor/layers/fused_moe/all2all_utils.py``, and from the kernels' own repositories.
"""

from __future__ import annotations

from hwtune.core.catalogue.base import (
    All2AllRules,
    Backend,
    CCRange,
    EngineFlags,
    Feature,
    Hazard,
    Probe,
    Tactic,
    fs,
    ints,
    multiple_of,
    priority,
)
from hwtune.core.packages import PackageRequirement

F = Feature
A2A = "vllm distributed/device_communicators/all2all.py"
BOTH = fs("dispatch_combine")
ANY_QUANT = fs("bf16", "fp16", "fp8", "nvfp4", "mxfp8", "mxfp4")
NODES = fs(F.INTRANODE, F.INTERNODE)
TORCH_PKG = PackageRequirement("torch", ">=2.4", "torch.distributed collectives")
DEEP_EP = PackageRequirement("deep-ep", "", "DeepEP kernels (vllm tools/ep_kernels)", alternatives=("deep_ep",))


PROBES = "hwtune.probes.all2all.candidates"
#: vLLM's --all2all-backend (vllm/config/parallel.py All2AllBackend).
VLLM_FLAG = "--all2all-backend"
#: SGLang's --moe-a2a-backend values (python/sglang/srt/server_args.py: none, deepep, flashinfer, ...).
SGLANG_FLAG = "--moe-a2a-backend"


def _single(
    name: str,
    summary: str,
    rules: All2AllRules,
    packages: tuple[PackageRequirement, ...],
    sources: dict[str, str],
    *,
    probe: Probe,
    order: dict[str, int],
    sglang: tuple[str, ...] = (),
    vllm: bool = True,
    needs_cuda_torch: bool = True,
    notes: tuple[str, ...] = (),
    hazards: tuple[Hazard, ...] = (),
) -> Backend:
    engines = {"sglang": EngineFlags((SGLANG_FLAG, *sglang) if sglang else ())}
    engines["vllm"] = (
        EngineFlags((VLLM_FLAG, name))
        if vllm
        else EngineFlags(
            missing=(
                f"{name} is hwtune's reference all-to-all and has no vLLM {VLLM_FLAG} value; "
                "pick another ranked backend or choose one with --backend"
            )
        )
    )
    return Backend(
        name=name,
        kind="all2all",
        summary=summary,
        rules=rules,
        packages=packages,
        probe=probe,
        engines=engines,
        priority=priority(**order),
        tactics=(Tactic("default", BOTH, All2AllRules(), summary=summary),),
        needs_cuda_torch=needs_cuda_torch,
        notes=notes,
        hazards=hazards,
        sources={"tactics": "one implementation", **sources},
    )


NAIVE = _single(
    "naive",
    "dispatch: every rank broadcasts its tokens; combine: all-reduce then slice",
    All2AllRules(
        device_types=fs("cuda", "cpu"),
        compute_capabilities=(CCRange((7, 0)),),
        quant_dtypes=ANY_QUANT,
        ep_sizes=multiple_of(1, 2),
        hidden_sizes=multiple_of(1),
        max_topk=None,
        features=NODES,
    ),
    (TORCH_PKG,),
    {
        "device_types": f"{A2A} NaiveAll2AllManager (torch.distributed: NCCL on CUDA, gloo on CPU)",
        "compute_capabilities": "NCCL collectives: any supported CUDA GPU",
        "quant_dtypes": "payload-agnostic: moves whatever tensors it is given",
        "ep_sizes": "needs at least two ranks",
        "hidden_sizes": "any",
        "features": f"{A2A}: plain collectives, intranode and internode; not declared graph-safe",
        "packages": "torch.distributed",
    },
    needs_cuda_torch=False,
    probe=Probe(f"{PROBES}.naive:NaiveCandidate"),
    order=dict(blackwell=6, others=5, cpu=2),
    sglang=("none",),
)

ALLGATHER_REDUCESCATTER = _single(
    "allgather_reducescatter",
    "dispatch: all_gatherv of tokens; combine: reduce_scatterv (vLLM's default)",
    All2AllRules(
        device_types=fs("cuda", "cpu"),
        compute_capabilities=(CCRange((7, 0)),),
        quant_dtypes=ANY_QUANT,
        ep_sizes=multiple_of(1, 2),
        hidden_sizes=multiple_of(1),
        features=NODES | fs(F.CUDA_GRAPHS),
    ),
    (TORCH_PKG,),
    {
        "device_types": f"{A2A} AgRsAll2AllManager (NCCL; gloo on CPU)",
        "compute_capabilities": "NCCL collectives",
        "quant_dtypes": f"{A2A} all_gatherv([hidden, topk_w, topk_ids, *extra]): payload-agnostic",
        "ep_sizes": "needs at least two ranks",
        "hidden_sizes": "any",
        "features": "vllm config/parallel.py default all2all_backend; NCCL collectives capture in CUDA graphs",
        "packages": "torch.distributed",
    },
    needs_cuda_torch=False,
    probe=Probe(f"{PROBES}.allgather_reducescatter:AllGatherReduceScatterCandidate"),
    order=dict(blackwell=4, others=2, cpu=0),
    sglang=("none",),
)

NCCL_ALLTOALLV = _single(
    "nccl_alltoallv",
    "textbook dispatch/combine with torch.distributed.all_to_all_single and per-rank splits",
    All2AllRules(
        device_types=fs("cuda", "cpu"),
        compute_capabilities=(CCRange((7, 0)),),
        quant_dtypes=ANY_QUANT,
        ep_sizes=multiple_of(1, 2),
        hidden_sizes=multiple_of(1),
        features=NODES,
    ),
    (TORCH_PKG,),
    {
        "device_types": "torch.distributed.all_to_all_single: NCCL on CUDA, gloo on CPU",
        "compute_capabilities": "NCCL",
        "quant_dtypes": "payload-agnostic",
        "ep_sizes": "needs at least two ranks",
        "hidden_sizes": "any",
        "features": "split sizes are exchanged on the host each step: not CUDA-graph safe",
        "packages": "torch.distributed",
    },
    needs_cuda_torch=False,
    notes=("not a vLLM --all2all-backend value; hwtune's reference all-to-all",),
    probe=Probe(f"{PROBES}.nccl_alltoallv:AllToAllVCandidate"),
    order=dict(blackwell=5, others=4, cpu=1),
    vllm=False,
)

DEEPEP_HIGH_THROUGHPUT = _single(
    "deepep_high_throughput",
    "DeepEP normal (high-throughput) kernels, for prefill",
    All2AllRules(
        device_types=fs("cuda"),
        compute_capabilities=(CCRange((9, 0), (10, 3)),),
        quant_dtypes=fs("bf16", "fp8"),
        ep_sizes=multiple_of(1, 2),
        hidden_sizes=multiple_of(1),
        features=NODES,
        interconnect="nvlink",
    ),
    (DEEP_EP,),
    {
        "device_types": f"{A2A} DeepEPHTAll2AllManager",
        "compute_capabilities": "deepseek-ai/DeepEP README: Hopper (SM90); SM100 support added later",
        "quant_dtypes": "vllm fused_moe/deepep_ht_prepare_finalize.py: bf16 or block fp8 dispatch",
        "ep_sizes": "needs at least two ranks",
        "hidden_sizes": "any",
        "interconnect": "DeepEP intranode buffers need NVLink between GPUs",
        "features": f"{A2A}: RDMA buffers when internode, NVLink within a node; host-synchronising layout: "
        "not CUDA-graph safe",
        "packages": "deep_ep (vllm tools/ep_kernels/README.md)",
    },
    probe=Probe(f"{PROBES}.deepep:DeepEPHighThroughputCandidate", ("deep_ep",)),
    order=dict(blackwell=3, others=1),
    sglang=("deepep", "--deepep-mode", "normal"),
)

DEEPEP_LOW_LATENCY = _single(
    "deepep_low_latency",
    "DeepEP low-latency kernels (RDMA/NVLink, graph-safe), for decode",
    All2AllRules(
        device_types=fs("cuda"),
        compute_capabilities=(CCRange((9, 0), (10, 3)),),
        quant_dtypes=fs("bf16", "fp8"),
        ep_sizes=multiple_of(1, 2),
        hidden_sizes=multiple_of(1),
        features=NODES | fs(F.CUDA_GRAPHS),
        interconnect="nvlink",
    ),
    (DEEP_EP,),
    {
        "device_types": f"{A2A} DeepEPLLAll2AllManager",
        "compute_capabilities": "deepseek-ai/DeepEP README: Hopper (SM90); SM100 support added later",
        "quant_dtypes": "vllm fused_moe/deepep_ll_prepare_finalize.py: bf16 or fp8 dispatch",
        "ep_sizes": "needs at least two ranks",
        "hidden_sizes": "DeepEP LL: hidden sizes compiled into the kernel (SWITCH_HIDDEN); checked at run time",
        "interconnect": "allow_nvlink_for_low_latency_mode=True",
        "features": f"{A2A}: low_latency_mode; fixed-size buffers, CUDA-graph safe",
        "packages": "deep_ep",
    },
    probe=Probe(f"{PROBES}.deepep:DeepEPLowLatencyCandidate", ("deep_ep",)),
    order=dict(blackwell=2, others=0),
    sglang=("deepep", "--deepep-mode", "low_latency"),
)

PPLX = _single(
    "pplx",
    "Perplexity pplx-kernels all-to-all (NVSHMEM)",
    All2AllRules(
        device_types=fs("cuda"),
        compute_capabilities=(CCRange((9, 0)),),
        quant_dtypes=fs("bf16", "fp8"),
        ep_sizes=multiple_of(1, 2),
        hidden_sizes=multiple_of(1),
        features=NODES | fs(F.CUDA_GRAPHS),
    ),
    (PackageRequirement("pplx-kernels", "", "pplx all-to-all kernels", alternatives=("pplx_kernels",)),),
    {
        "device_types": f"{A2A} PPLXAll2AllManager (older vLLM)",
        "compute_capabilities": "ppl-ai/pplx-kernels README: Hopper",
        "quant_dtypes": "vllm fused_moe/pplx_prepare_finalize.py: bf16 or fp8",
        "ep_sizes": "needs at least two ranks",
        "hidden_sizes": "any",
        "features": f"{A2A}: NVSHMEM internode, P2P intranode; graph-safe",
        "packages": "pplx_kernels",
    },
    notes=("removed from recent vLLM: its validator falls back to allgather_reducescatter",),
    probe=Probe(f"{PROBES}.pplx:PPLXCandidate", ("pplx_kernels",)),
    order=dict(blackwell=7, others=3),
)

FLASHINFER_NVLINK_ONE_SIDED = _single(
    "flashinfer_nvlink_one_sided",
    "FlashInfer/TRT-LLM MoeAlltoAll one-sided kernels over (MN)NVLink",
    All2AllRules(
        device_types=fs("cuda"),
        compute_capabilities=(CCRange((9, 0)),),
        quant_dtypes=fs("nvfp4"),
        ep_sizes=multiple_of(1, 2, 64),
        hidden_sizes=multiple_of(1),
        max_topk=8,
        features=NODES | fs(F.CUDA_GRAPHS),
        interconnect="nvlink",
    ),
    (
        PackageRequirement(
            "flashinfer-python",
            ">=0.5.0",
            "flashinfer.comm.trtllm_moe_alltoall.MoeAlltoAll",
            alternatives=("flashinfer>=0.5.0",),
        ),
    ),
    {
        "device_types": f"{A2A} FlashInferNVLinkOneSidedManager",
        "compute_capabilities": "flashinfer comm/trtllm_moe_alltoall.py: no arch gate in Python (MNNVL memory)",
        "quant_dtypes": "vllm fused_moe/all2all_utils.py maybe_make_prepare_finalize: 'only supports nvfp4 "
        "activation quantization'; its workspace was sized for nvfp4 and corrupted bf16 (fail closed)",
        "ep_sizes": "flashinfer MoeAlltoAll: at most 64 ranks",
        "hidden_sizes": "any",
        "max_topk": "flashinfer MoeAlltoAll: top_k <= 8",
        "interconnect": "MnnvlMemory maps every peer's memory: NVLink (MNNVL across nodes)",
        "features": "vllm: 'Use flashinfer high-throughput a2a kernels' for MNNVL; checkpoint_prepare/restore "
        "for CUDA graphs",
        "packages": "flashinfer-python with trtllm_moe_alltoall",
    },
    hazards=(
        Hazard(
            ep_sizes=ints(2),
            message="at EP 2 its kernels failed whenever a rank's token count was odd (1, 3, 5, 17, 33 tokens: "
            "'CUDA error: misaligned address' or an abort; 2 to 24 even counts were correct): pad each rank's "
            "batch to an even number of tokens",
            source="hwtune measurement, flashinfer 0.6.18.post1 on 2 x H200, 2026-11-21 (docs/all2all.md)",
        ),
    ),
    probe=Probe(f"{PROBES}.flashinfer_one_sided:OneSidedCandidate", ("flashinfer",)),
    order=dict(blackwell=0, others=7),
    sglang=("flashinfer",),
)

FLASHINFER_NVLINK_TWO_SIDED = _single(
    "flashinfer_nvlink_two_sided",
    "FlashInfer MnnvlMoe two-sided all-to-all-v over (MN)NVLink",
    All2AllRules(
        device_types=fs("cuda"),
        compute_capabilities=(CCRange((9, 0)),),
        quant_dtypes=fs("bf16", "fp16", "fp8", "nvfp4"),
        ep_sizes=multiple_of(1, 2),
        hidden_sizes=multiple_of(1),
        features=NODES,
        interconnect="nvlink",
    ),
    (
        PackageRequirement(
            "flashinfer-python",
            ">=0.3.0",
            "flashinfer.comm.trtllm_alltoall.MnnvlMoe",
            alternatives=("flashinfer>=0.3.0",),
        ),
    ),
    {
        "device_types": f"{A2A} FlashInferNVLinkTwoSidedManager (was flashinfer_all2allv)",
        "compute_capabilities": "flashinfer comm/trtllm_alltoall.py: MNNVL memory, no arch gate in Python",
        "quant_dtypes": f"{A2A}: mnnvl_moe_alltoallv on x and its scales (payload bytes)",
        "ep_sizes": "needs at least two ranks",
        "hidden_sizes": "any",
        "interconnect": "MnnvlMemory: NVLink peers",
        "features": "vllm config/parallel.py 'Use flashinfer two-sided kernels for mnnvl'",
        "packages": "flashinfer-python",
    },
    probe=Probe(f"{PROBES}.flashinfer_two_sided:TwoSidedCandidate", ("flashinfer",)),
    order=dict(blackwell=1, others=6),
    sglang=("flashinfer",),
)

ALL2ALL_BACKENDS: tuple[Backend, ...] = (
    NAIVE,
    ALLGATHER_REDUCESCATTER,
    DEEPEP_HIGH_THROUGHPUT,
    DEEPEP_LOW_LATENCY,
    FLASHINFER_NVLINK_ONE_SIDED,
    FLASHINFER_NVLINK_TWO_SIDED,
    PPLX,
    NCCL_ALLTOALLV,
)
