"""Backend declarations: allowlists, features, tactics, packages, and the sources of each fact.

A declaration is data, not code, so that tests can pin every fact and ``hwtune backends`` can print it.
Every value set is an allowlist: validation rejects anything not listed (fail closed), which is how a new
kv-cache dtype can never land on a backend that merely fails to check for it.

A tactic is a sub-implementation of a backend (FlashInfer's fa2, fa3, xqa, ...). Its rule fields narrow the
backend's: ``None`` means "as the backend". A backend serves a spec when its own rules pass and, for each
phase the engine runs (decode and prefill), at least one tactic passes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Iterable, Literal, Mapping

from hwtune.core.packages import PackageRequirement

Kind = Literal["attention", "all2all"]
DeviceType = Literal["cuda", "cpu"]


class Feature(str, Enum):
    """Capabilities a spec may demand; a backend that does not declare one is rejected when it is needed."""

    # attention
    DECODE_LSE = "decode_lse"  # returns the softmax log-sum-exp in decode: needed for DCP
    PCP = "pcp"  # prefill context parallelism
    PCP_WITH_DCP = "pcp_with_dcp"  # prefill and decode context parallelism at once
    CP_INTERLEAVED_SPEC = "cp_interleaved_spec"  # spec decode with KV dealt to CP ranks in chunks > 1 token
    SINKS = "sinks"  # attention sinks (gpt-oss)
    SLIDING_WINDOW = "sliding_window"
    SOFT_CAP = "logits_soft_cap"
    MLA = "mla"  # multi-head latent attention (DeepSeek)
    SPEC_DECODE = "spec_decode"  # several query tokens per request in decode
    CUDA_GRAPHS = "cuda_graphs"
    # all2all
    INTRANODE = "intranode"
    INTERNODE = "internode"


#: What each feature means, in the words an error message uses.
FEATURE_WORDS: Mapping[Feature, str] = {
    Feature.DECODE_LSE: "returns the softmax log-sum-exp (LSE) during decode",
    Feature.PCP: "supports prefill context parallelism (PCP)",
    Feature.PCP_WITH_DCP: "supports prefill and decode context parallelism together (PCP with DCP)",
    Feature.CP_INTERLEAVED_SPEC: "supports speculative decoding with the KV interleaved over context-parallel ranks "
    "in chunks of more than one token",
    Feature.SINKS: "supports attention sinks",
    Feature.SLIDING_WINDOW: "supports sliding-window attention",
    Feature.SOFT_CAP: "supports logits soft-capping",
    Feature.MLA: "implements multi-head latent attention (MLA)",
    Feature.SPEC_DECODE: "accepts several query tokens per request in decode (speculative decoding)",
    Feature.CUDA_GRAPHS: "can be captured in CUDA graphs",
    Feature.INTRANODE: "runs within one node",
    Feature.INTERNODE: "runs across nodes",
}


@dataclass(frozen=True)
class IntRule:
    """Allowlist of integers: explicit values, or a multiple-of rule within [minimum, maximum]."""

    values: frozenset[int] = frozenset()
    multiple_of: int | None = None
    minimum: int | None = None
    maximum: int | None = None

    def allows(self, value: int) -> bool:
        """Whether ``value`` is allowed; an empty rule allows nothing (fail closed)."""
        if self.values:
            return value in self.values
        if self.multiple_of is None:
            return False  # an empty rule allows nothing: fail closed
        if value % self.multiple_of:
            return False
        if self.minimum is not None and value < self.minimum:
            return False
        return self.maximum is None or value <= self.maximum

    def describe(self) -> str:
        """The rule in words, for error messages and the catalogue doc."""
        if self.values:
            return ", ".join(str(v) for v in sorted(self.values))
        if self.multiple_of is None:
            return "none"
        parts = [f"multiples of {self.multiple_of}" if self.multiple_of > 1 else "any"]
        if self.minimum is not None:
            parts.append(f">= {self.minimum}")
        if self.maximum is not None:
            parts.append(f"<= {self.maximum}")
        return " ".join(parts)

    def to_json(self) -> object:
        if self.values:
            return sorted(self.values)
        return {"multiple_of": self.multiple_of, "min": self.minimum, "max": self.maximum}


def ints(*values: int) -> IntRule:
    """An allowlist of exactly these integers (shorthand for declarations)."""
    return IntRule(values=frozenset(values))


def multiple_of(n: int, minimum: int | None = None, maximum: int | None = None) -> IntRule:
    """An allowlist of multiples of ``n`` within optional inclusive bounds (shorthand for declarations)."""
    return IntRule(multiple_of=n, minimum=minimum, maximum=maximum)


@dataclass(frozen=True)
class CCRange:
    """Inclusive range of CUDA compute capabilities, e.g. CCRange((9, 0), (9, 0)) for Hopper only."""

    low: tuple[int, int]
    high: tuple[int, int] = (99, 9)

    def allows(self, cc: tuple[int, int]) -> bool:
        """Whether compute capability ``cc`` lies in the inclusive range."""
        return self.low <= cc <= self.high

    def describe(self) -> str:
        """The range in words ("SM >= 8.0", "SM 9.0", "SM 8.0 to 9.0"); the default high means open-ended."""
        lo = f"{self.low[0]}.{self.low[1]}"
        if self.high == (99, 9):
            return f"SM >= {lo}"
        hi = f"{self.high[0]}.{self.high[1]}"
        return f"SM {lo}" if self.low == self.high else f"SM {lo} to {hi}"


def describe_ccs(ranges: Iterable[CCRange]) -> str:
    """Several compute-capability ranges in words, joined by "or"."""
    return " or ".join(r.describe() for r in ranges)


def fs(*values: str) -> frozenset[str]:
    """A frozenset of strings (shorthand for declarations' allowlists)."""
    return frozenset(values)


@dataclass(frozen=True)
class AttentionRules:
    """Rule fields shared by attention backends and their tactics (None on a tactic = as the backend)."""

    device_types: frozenset[str] | None = None
    compute_capabilities: tuple[CCRange, ...] | None = None
    dtypes: frozenset[str] | None = None
    kv_cache_dtypes: frozenset[str] | None = None
    head_sizes: IntRule | None = None
    block_sizes: IntRule | None = None
    kv_layouts: frozenset[str] | None = None
    #: Query heads per KV head (GQA group size) the kernel handles.
    gqa_groups: IntRule | None = None
    #: KV-cache dtypes that need a newer GPU than the backend does (e.g. fp8 in Triton needs SM 8.9).
    kv_cache_dtype_min_cc: Mapping[str, tuple[int, int]] | None = None
    features: frozenset[Feature] | None = None


@dataclass(frozen=True)
class All2AllRules:
    """Rule fields shared by all2all backends and their tactics (None on a tactic = as the backend)."""

    device_types: frozenset[str] | None = None
    compute_capabilities: tuple[CCRange, ...] | None = None
    quant_dtypes: frozenset[str] | None = None
    ep_sizes: IntRule | None = None
    hidden_sizes: IntRule | None = None
    max_topk: int | None = None
    features: frozenset[Feature] | None = None
    #: Interconnect the backend needs between the GPUs of a node ("nvlink"), or None for any.
    interconnect: str | None = None


@dataclass(frozen=True)
class Tactic:
    """A sub-implementation a backend can run, with its own limits and the phases it serves."""

    name: str
    phases: frozenset[str]
    rules: AttentionRules | All2AllRules
    summary: str = ""
    packages: tuple[PackageRequirement, ...] = ()
    sources: Mapping[str, str] = field(default_factory=dict)
    #: Seconds of first-use JIT/compilation on an H100, for plan estimates (None: a few seconds at most).
    compile_s: float | None = None
    #: Seconds each later workload costs on an H100 for a tactic compiled or searched per workload (torch.compile
    #: per shape, a per-workload config search). None: nothing for a JIT kernel, ``compile_s`` again for a backend
    #: compiled per shape.
    recompile_s: float | None = None
    #: Measured by ``hwtune tune --quick`` (when its backend is).
    quick: bool = True
    #: A call of the backend's kernels that no engine makes (hwtune's own arguments): its measurements rank the
    #: backend for hwtune's own catalogue only, never an engine's backend built on it.
    hwtune_only: bool = False
    #: Tactics whose launch this one's per-workload search starts from and keeps unless it measures a faster one: at
    #: any shape it is no slower than those, so where both were measured the selector leaves them out.
    covers: tuple[str, ...] = ()


#: Architecture families that static priorities are declared for (``DeviceProfile.family``).
FAMILIES: tuple[str, ...] = ("blackwell", "blackwell_consumer", "ampere_hopper", "other", "cpu")


def priority(*, blackwell: int | None = None, others: int | None = None, cpu: int | None = None) -> Mapping[str, int]:
    """A backend's place in each family's static order (0 first); ``others`` = SM 8.x/9.x, SM 12.x and other
    CUDA GPUs, which every supported engine orders alike; None = not in that family's list."""
    places = {
        "blackwell": blackwell,
        "blackwell_consumer": others,
        "ampere_hopper": others,
        "other": others,
        "cpu": cpu,
    }
    return {family: place for family, place in places.items() if place is not None}


@dataclass(frozen=True)
class Probe:
    """How hwtune runs a backend itself: the candidate class (``module:Class``, imported only inside a
    worker) and the Python modules it needs (checked with ``find_spec`` before a worker starts)."""

    ref: str
    modules: tuple[str, ...] = ()
    #: The phases the candidate measures where they are fewer than the record's (None: every phase), and why not the
    #: others: vLLM's FLASHMLA backend serves prefill too, through vLLM's MLA prefill path, not FlashMLA's kernel.
    phases: frozenset[str] | None = None
    phases_why: str = ""

    def measures(self, phase: str) -> bool:
        """Whether the candidate measures a workload of ``phase`` (a mixed batch needs decode and prefill)."""
        need = {"decode", "prefill"} if phase == "mixed" else {phase}
        return self.phases is None or need <= self.phases


@dataclass(frozen=True)
class EngineFlags:
    """How one engine is told to use a backend: its arguments, per tactic where the engine names kernels
    separately; ``missing`` says why there is none (in the words of the error the adapter raises)."""

    args: tuple[str, ...] = ()
    by_tactic: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    missing: str = ""

    def for_tactic(self, tactic: str | None) -> tuple[str, ...]:
        """The flag arguments for ``tactic`` (empty: the engine has no equivalent)."""
        return self.by_tactic.get(tactic or "", self.args)


@dataclass(frozen=True)
class Hazard:
    """A measured failure mode that validity cannot express because it depends on what the engine sends at
    run time (a batch's token count), not on the spec. Selection keeps the backend and says, in its notes,
    what the engine must do to stay clear of it. ``ep_sizes``/``quant_dtypes`` narrow where it applies."""

    message: str
    source: str
    ep_sizes: IntRule | None = None
    quant_dtypes: frozenset[str] | None = None

    def applies(self, spec: object) -> bool:
        """Whether the hazard concerns ``spec``: its EP size and quant dtype fall within the hazard's narrowing (an
        unset narrowing matches any spec)."""
        ep = getattr(spec, "ep_size", None)
        if self.ep_sizes is not None and (ep is None or not self.ep_sizes.allows(ep)):
            return False
        quant = getattr(spec, "quant_dtype", None)
        return self.quant_dtypes is None or quant in self.quant_dtypes


@dataclass(frozen=True)
class Backend:
    """One backend as an engine names it, with its allowlists and where each fact comes from.

    ``sources`` maps each rule field (and "features", "packages", "tactics") to the document or code that
    states it; tests require one for every declared fact.
    """

    name: str
    kind: Kind
    summary: str
    rules: AttentionRules | All2AllRules
    tactics: tuple[Tactic, ...]
    packages: tuple[PackageRequirement, ...] = ()
    needs_cuda_torch: bool = True
    sources: Mapping[str, str] = field(default_factory=dict)
    #: What hwtune itself can run of it (probes); informative, not part of validity.
    notes: tuple[str, ...] = ()
    #: Measured run-time failure modes; selection repeats those that apply to the spec in its notes.
    hazards: tuple[Hazard, ...] = ()
    #: The candidate hwtune runs for it (None: selectable from static priorities and imported measurements).
    probe: Probe | None = None
    #: Engine name ("vllm", "sglang") -> how that engine is told to use this backend.
    engines: Mapping[str, EngineFlags] = field(default_factory=dict)
    #: Place in the static order per architecture family (see ``priority``); absent: not in that list.
    priority: Mapping[str, int] = field(default_factory=dict)
    #: Family -> phase -> tactic names in the order to take them when nothing was measured; a family not
    #: listed uses "ampere_hopper"; no entry at all: declaration order.
    tactic_order: Mapping[str, Mapping[str, tuple[str, ...]]] = field(default_factory=dict)
    #: Compiled per shape (torch.compile): its compilation belongs to each measurement, not to warm-up.
    compile_per_shape: bool = False
    #: Measured by ``hwtune tune --quick``.
    quick: bool = False

    def quick_names(self) -> tuple[str, ...]:
        """How the quick plan names this backend: the backend, or ``NAME:tactic`` per quick tactic."""
        if not self.quick:
            return ()
        tactics = [t.name for t in self.tactics if t.quick]
        return (self.name,) if len(tactics) == len(self.tactics) else tuple(f"{self.name}:{t}" for t in tactics)

    def has(self, feature: Feature) -> bool:
        """Whether the backend declares ``feature`` in its own rules (tactic-level features are not consulted)."""
        feats = self.rules.features or frozenset()
        return feature in feats

    def tactic(self, name: str) -> Tactic | None:
        """The tactic called ``name``, or None if the backend has none by that name."""
        return next((t for t in self.tactics if t.name == name), None)

    def effective(self, tactic: Tactic) -> AttentionRules | All2AllRules:
        """The tactic's rules with None fields filled from the backend's."""
        base = self.rules
        values = {}
        for name in base.__dataclass_fields__:
            own = getattr(tactic.rules, name)
            values[name] = getattr(base, name) if own is None else own
        return type(base)(**values)
