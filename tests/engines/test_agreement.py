"""The differential test: hwtune's static choice for an engine version equals what that version's selector does.

Over a broad generated set of configurations (devices SM 8.0 to 12.1, MLA and not, head sizes, dtypes, kv-cache
dtypes, block sizes given and not, sinks, sliding window, soft-cap, DCP, PCP, speculative decoding with interleaved
CP), hwtune's selection (``select_attention(..., db=False)``: nothing measured) is compared with the snapshot as
the engine reads it (``tests/engines/oracle.py``, a separate interpreter). They must agree on the choice and on
the valid set, except where hwtune deliberately differs: a backend the engine's selector accepts and which then
fails at start (the snapshot's ``start_checks``) is rejected up front, said in its rejection, listed in
``Selection.differences`` and shown by ``--explain``. Every listed difference must occur in the grid, so none
is dead. Run with ``-s`` for the counts (docs/engines.md quotes them).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

import pytest

from hwtune.core.devices import DeviceProfile
from hwtune.core.errors import NoValidBackendError
from hwtune.core.types import AttentionSpec
from hwtune.selector.api import select_attention
from tests.engines import oracle

CCS = [(8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (10, 3), (11, 0), (12, 0), (12, 1)]
BLOCKS = [None, 8, 16, 32, 64, 128, 256]
CP = [  # (dcp, pcp, spec_decode, cp_interleave)
    (1, 1, False, 1),
    (1, 1, True, 1),
    (2, 1, False, 1),
    (1, 2, False, 1),
    (2, 2, False, 1),
    (2, 1, True, 2),
]
TARGETS = [("vllm", "0.33.0"), ("vllm", "0.32.0"), ("sglang", "0.5.23")]
PER_KIND = {"mha": 2400, "mla": 1200}


def _draw(rng: random.Random, mla: bool) -> dict:
    dcp, pcp, spec, interleave = rng.choice(CP)
    common = {
        "cc": rng.choice(CCS),
        "mla": mla,
        "dtype": rng.choice(["bfloat16", "float16", "float32"] if not mla else ["bfloat16", "float16"]),
        "block_size": rng.choice(BLOCKS),
        "sliding_window": rng.random() < 0.2,
        "soft_cap": rng.random() < 0.15,
        "dcp": dcp > 1,
        "pcp": pcp > 1,
        "spec_decode": spec,
        "cp_interleave": interleave,
    }
    if mla:
        nope = rng.choice([128, 128, 64, 96])
        return {
            **common,
            "head_size": rng.choice([576, 576, 512]),
            "num_heads": rng.choice([16, 128]),
            "num_kv_heads": 1,
            "kv_cache_dtype": rng.choice(["auto", "auto", "fp8_e4m3", "fp8_e5m2", "bfloat16"]),
            "sinks": False,
            "qk_nope_head_dim": nope,
            "qk_rope_head_dim": 64,
            "v_head_dim": 128,
        }
    return {
        **common,
        "head_size": rng.choice([20, 64, 80, 96, 128, 128, 192, 256, 320, 512]),
        "num_heads": 32,
        "num_kv_heads": rng.choice([8, 32, 4]),
        "kv_cache_dtype": rng.choice(
            ["auto", "auto", "bfloat16", "float16", "fp8_e4m3", "fp8_e5m2", "nvfp4", "turboquant_k8v4"]
        ),
        "sinks": rng.random() < 0.25,
        "qk_nope_head_dim": None,
        "qk_rope_head_dim": None,
        "v_head_dim": None,
    }


#: Model classes drawn per kind (None: a spec given by head counts), for engines' per-architecture rules.
ARCHITECTURES = {False: ["GptOssForCausalLM", "LlamaForCausalLM", None, None], True: ["DeepseekV3ForCausalLM", None]}


def configurations() -> list[dict]:
    """The generated grid: a seeded draw per kind (MHA, MLA), the same every run; the architecture from a second
    seeded stream, so the rest of each configuration is what it was before architectures were drawn."""
    rng, arch = random.Random(18), random.Random(19)
    grid = [_draw(rng, kind == "mla") for kind, n in PER_KIND.items() for _ in range(n)]
    return [{**c, "architecture": arch.choice(ARCHITECTURES[c["mla"]])} for c in grid]


@dataclass
class Outcome:
    """hwtune's static selection for one configuration, or what its NoValidBackendError said."""

    backend: str | None
    ranked: list[str]
    rejected: dict
    notes: str = ""
    explain: str = ""


def spec_and_device(c: dict) -> tuple[AttentionSpec, DeviceProfile]:
    """The AttentionSpec and simulated device of configuration ``c``."""
    mla = {}
    if c["mla"]:
        rope = c["qk_rope_head_dim"]
        mla = dict(use_mla=True, kv_lora_rank=c["head_size"] - rope, qk_rope_head_dim=rope)
        mla.update(qk_nope_head_dim=c["qk_nope_head_dim"], v_head_dim=c["v_head_dim"])
    spec = AttentionSpec(
        c["num_heads"],
        c["num_kv_heads"],
        c["head_size"],
        dtype=c["dtype"],
        kv_cache_dtype=c["kv_cache_dtype"],
        block_size=c["block_size"],
        sinks=c["sinks"],
        sliding_window=4096 if c["sliding_window"] else None,
        logits_soft_cap=30.0 if c["soft_cap"] else None,
        dcp_size=2 if c["dcp"] else 1,
        pcp_size=2 if c["pcp"] else 1,
        spec_tokens=2 if c["spec_decode"] else 0,
        cp_interleave=c["cp_interleave"],
        architecture=c.get("architecture"),
        **mla,
    )
    return spec, DeviceProfile(name="GPU SM %d.%d" % c["cc"], compute_capability=c["cc"], simulated=True)


def hwtune_selects(c: dict, engine: str, version: str) -> Outcome:
    """hwtune's static selection (nothing measured, every package assumed installed) for configuration ``c``."""
    spec, device = spec_and_device(c)
    try:
        sel = select_attention(
            spec,
            device=device,
            db=False,
            assume_installed=True,
            engine=engine,
            engine_version=version,
            distributed=False,
        )
    except NoValidBackendError as err:
        return Outcome(None, [], dict(err.rejected))
    ranked = [r.backend for r in sel.ranked]
    return Outcome(sel.backend, ranked, dict(sel.rejected), " ".join(sel.notes), sel.explain())


def _difference_ids(engine: str) -> dict[str, str]:
    """Each start check's reason (as hwtune quotes it) -> its id."""
    snap = oracle.load(engine)
    checks = list(snap.get("start_checks", []))
    checks += [c for b in snap.get("backends", {}).values() for c in b.get("start_checks", [])]
    return {c["reason"]: c["id"] for c in checks}


def compare_vllm(c: dict, version: str, snap: dict, ids: dict[str, str], counts: Counter) -> str | None:
    """One configuration against vLLM's selector: a problem in words, or None when they agree or differ only on
    purpose (``counts`` records each difference that fired, and "choice differs" when it changed the choice)."""
    choice, valid = oracle.vllm_choice(snap, version, c)
    got = hwtune_selects(c, "vllm", version)
    extra = [n for n in got.ranked if n not in valid]
    if extra:
        return f"hwtune ranks {extra}, which vLLM {version} does not accept, for {c}"
    dropped = [n for n in valid if n not in got.ranked]
    for name in valid:
        expected = oracle.start_failures(snap, version, name, c)
        reasons = got.rejected.get(name, ())
        fired = {i for reason in reasons for text, i in ids.items() if text in reason and "up front" in reason}
        if (name in dropped) != bool(expected) or fired != expected:
            return f"{name}: hwtune's deliberate rejections {sorted(fired)} are not the snapshot's {sorted(expected)}"
        counts.update(fired)
    if got.ranked != [n for n in valid if n not in dropped]:
        return f"hwtune's order {got.ranked} is not vLLM {version}'s {valid} for {c}"
    if got.backend != choice:
        counts["choice differs"] += 1
        if got.backend is not None and f"would choose {choice}" not in got.notes:
            return f"the choice differs from vLLM {version}'s {choice} without a note, for {c}"
        if got.backend is not None and "deliberate differences from vLLM" not in got.explain:
            return f"--explain does not show the deliberate difference for {c}"
    return None


def compare_sglang(c: dict, version: str, snap: dict, counts: Counter) -> str | None:
    """One configuration against SGLang: the choice is its default, and the valid set is the default then every
    backend it accepts when given explicitly, in the snapshot's order (``counts`` records how many it accepts)."""
    choice, valid = oracle.sglang_valid(snap, version, c)
    got = hwtune_selects(c, "sglang", version)
    if got.backend != choice:
        return f"hwtune chose {got.backend}, SGLang {version} {choice}, for {c}"
    if got.ranked != valid:
        return f"hwtune's valid set {got.ranked} is not SGLang {version}'s {valid} for {c}"
    counts[f"valid {min(len(valid), 4)}{'+' if len(valid) >= 4 else ''}"] += 1
    counts.update(f"accepts {n}" for n in valid[1:])
    return None


@pytest.mark.parametrize("engine, version", TARGETS, ids=[f"{e}-{v}" for e, v in TARGETS])
def test_static_choice_agrees_with_the_engine(engine: str, version: str) -> None:
    snap = oracle.load(engine)
    ids = _difference_ids(engine)
    counts: Counter = Counter()
    problems = []
    grid = configurations()
    for c in grid:
        if engine == "vllm":
            problem = compare_vllm(c, version, snap, ids, counts)
        else:
            problem = compare_sglang(c, version, snap, counts)
        if problem:
            problems.append(problem)
    differs = counts.pop("choice differs", 0)
    head = f"\n{engine} {version}: {len(grid)} configurations; same choice in {len(grid) - differs - len(problems)}; "
    if engine == "vllm":
        print(f"{head}{differs} choices differ on purpose; backends dropped on purpose, by difference: {dict(counts)}")
    else:
        sizes = {k[len("valid ") :]: v for k, v in sorted(counts.items()) if k.startswith("valid ")}
        accepted = {k[len("accepts ") :]: v for k, v in counts.most_common() if k.startswith("accepts ")}
        print(f"{head}valid-set sizes (default included): {sizes}; accepted besides the default: {accepted}")
    assert not problems, f"{len(problems)} disagreements, first: {problems[:3]}"
    if engine == "vllm":
        unseen = set(ids.values()) - set(counts)
        assert not unseen, f"listed differences the grid never exercises: {unseen}"
    else:  # every modelled backend is accepted somewhere in the grid, and the grid exercises choice among several
        unseen = set(oracle.load(engine)["explicit"]["order"]["value"]) - {k[len("accepts ") :] for k in counts}
        assert not unseen and counts["valid 2"] + counts["valid 3"] + counts["valid 4+"] > 300, (unseen, counts)
