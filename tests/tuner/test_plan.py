"""Plans from model configs, TOML files and defaults; refinement ordering."""

import json
import math
from collections import Counter
from pathlib import Path

import pytest

from hwtune.core.devices import CPU_PROFILE, simulated
from hwtune.core.errors import InvalidSpecError
from hwtune.core.records import LatencyStats, MeasurementRecord
from hwtune.core.types import AttentionSpec
from hwtune.tuner.plan_file import plan_from_toml
from hwtune.tuner.plan_model import QUICK_BACKENDS, build_plan, default_plan, plan_from_model
from hwtune.tuner.schedule import informative, order_refinements

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "tests" / "data" / "models"


def test_model_plan_levels_and_memory_filter() -> None:
    plan = plan_from_model(MODELS / "llama-3.1-8b.json", device=simulated("h100"))
    phases = {i.workload.phase for i in plan.items}
    assert phases == {"decode", "prefill", "mixed"}
    assert {i.level for i in plan.items} == {0, 1}
    assert any("does not fit" in n for n in plan.notes) and any("not a MoE model" in n for n in plan.notes)
    for item in plan.items:  # nothing planned that the H100's memory cannot hold
        w = item.workload
        assert 3 * 4096 * (w.batch * w.context_len) <= 0.35 * simulated("h100").memory_bytes
    assert plan.digest() == plan_from_model(MODELS / "llama-3.1-8b.json", device=simulated("h100")).digest()


def test_moe_model_plans_all2all_at_the_ep_size() -> None:
    plan = plan_from_model(MODELS / "deepseek-v3.json", tp=8, ep=8, device=simulated("h100"))
    a2a = [i.workload for i in plan.items if i.kind == "all2all"]
    # DeepSeek-V3's quantization_config is block fp8 with dynamic activations: the engine dispatches fp8
    assert a2a and {w.spec.ep_size for w in a2a} == {8} and {w.spec.quant_dtype for w in a2a} == {"fp8"}
    assert "all2all planned for fp8 activations: the model's quantization (fp8) dispatches fp8" in " ".join(plan.notes)
    assert all(i.workload.spec.use_mla for i in plan.items if i.kind == "attention")


def _dtypes(plan) -> set[str]:
    return {i.workload.spec.quant_dtype for i in plan.items if i.kind == "all2all"}


def test_an_nvfp4_model_plans_nvfp4_all2all_where_the_one_sided_kernel_is_valid() -> None:
    """The one-sided NVLink kernel accepts only nvfp4: planned from an NVFP4 checkpoint, every all2all item is one it
    is valid for (so tune measures it); planned from the same model unquantized, it is valid for none."""
    from hwtune.core import catalogue
    from hwtune.core.validation import check

    one_sided = catalogue.get("all2all", "flashinfer_nvlink_one_sided")
    b200 = simulated("b200")
    plan = plan_from_model(MODELS / "qwen3-30b-a3b-nvfp4", ep=2, kinds=["all2all"], device=b200)
    assert _dtypes(plan) == {"nvfp4"} and len(plan.items) == 7
    assert all(not check(one_sided, i.workload.spec, b200, assume_installed=True) for i in plan.items)
    assert any("the model's quantization (modelopt NVFP4) dispatches nvfp4" in n for n in plan.notes)
    plain = plan_from_model(MODELS / "qwen3-30b-a3b.json", ep=2, kinds=["all2all"], device=b200)
    assert _dtypes(plain) == {"bf16"}
    assert all(check(one_sided, i.workload.spec, b200, assume_installed=True) for i in plain.items)


def test_quant_dtypes_asked_for_win_over_the_model() -> None:
    plan = plan_from_model(MODELS / "qwen3-30b-a3b-nvfp4", ep=2, kinds=["all2all"], quant_dtypes=["bf16", "fp8_e4m3"])
    assert _dtypes(plan) == {"bf16", "fp8"} and any("asked for with --quant-dtype" in n for n in plan.notes)
    assert _dtypes(default_plan(kinds=["all2all"])) == {"bf16"}
    assert _dtypes(default_plan(kinds=["all2all"], quant_dtypes=["nvfp4"])) == {"nvfp4"}


def test_a_toml_plan_without_quant_dtype_follows_its_model(tmp_path: Path) -> None:
    import shutil

    shutil.copytree(MODELS / "qwen3-30b-a3b-nvfp4", tmp_path / "model")
    f = tmp_path / "p.toml"
    f.write_text('[model]\nconfig = "model/config.json"\n[all2all]\nep_size = 2\ntokens_per_rank = [16]\n')
    assert _dtypes(plan_from_toml(f)) == {"nvfp4"}
    f.write_text("[all2all]\nep_size = 2\nnum_experts = 8\ntopk = 2\nhidden_size = 256\ntokens_per_rank = [16]\n")
    assert _dtypes(plan_from_toml(f)) == {"bf16"}
    with pytest.raises(InvalidSpecError, match="a plan file names its all2all activation dtypes itself"):
        build_plan(None, f, quant_dtypes=("fp8",))


def test_tune_cli_quant_dtype_option() -> None:
    from typer.testing import CliRunner

    from hwtune.cli.main import app

    base = ["tune", "--dry-run", "--json", "--device", "cpu", "--kinds", "all2all", "--ep", "2"]
    model = ["--model", str(MODELS / "qwen3-30b-a3b-nvfp4")]
    res = CliRunner().invoke(app, [*base, *model])
    assert res.exit_code == 0, res.output
    items = json.loads(res.stdout)["plan"]["items"]
    assert {i["workload"]["spec"]["quant_dtype"] for i in items} == {"nvfp4"}
    res = CliRunner().invoke(app, [*base, *model, "--quant-dtype", "bf16,FP8", "--quant-dtype", "nvfp4"])
    assert res.exit_code == 0, res.output
    items = json.loads(res.stdout)["plan"]["items"]
    assert {i["workload"]["spec"]["quant_dtype"] for i in items} == {"bf16", "fp8", "nvfp4"}
    res = CliRunner().invoke(app, [*base, *model, "--quant-dtype", "int3"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert "--quant-dtype takes the activation dtypes the engine dispatches to the experts" in res.stderr
    assert "not 'int3'" in res.stderr


def test_quick_plan_is_small_and_engine_focused() -> None:
    plan = default_plan(quick=True)
    assert len(plan.items) <= 6 and plan.backends == QUICK_BACKENDS


def test_cpu_plans_are_cpu_sized() -> None:
    plan = default_plan(device=CPU_PROFILE)
    assert max(i.workload.context_len for i in plan.items) <= 2048


def test_a_toml_plan_of_a_mixed_model_measures_both_layer_kinds(tmp_path: Path) -> None:
    """A plan file naming Gemma-3 (1024-token windowed and full-attention layers) plans its grid for both kinds and
    records their windows, as a plan from --model does, so selection can cost one backend over every layer and the
    tune times a backend only where it serves both; a model of one kind plans its spec alone."""
    grid = '[[attention]]\nkv_layout = "NHD"\n[[attention.decode]]\nbatch = [1, 8]\ncontext = [4096]\n'
    f = tmp_path / "gemma.toml"
    f.write_text(f'[model]\nconfig = "{MODELS / "gemma-3-4b-it.json"}"\n' + grid)
    plan = plan_from_toml(f)
    assert plan.layer_windows == (1024, None)
    assert Counter(i.workload.spec.sliding_window for i in plan.items) == {1024: 2, None: 2}
    assert sum("measures both kinds" in n for n in plan.notes) == 1
    g = tmp_path / "llama.toml"
    g.write_text(f'[model]\nconfig = "{MODELS / "llama-3.1-8b.json"}"\n' + grid)
    single = plan_from_toml(g)
    assert single.layer_windows == () and {i.workload.spec.sliding_window for i in single.items} == {None}


def test_a_mixed_model_plan_file_notes_each_skipped_shape_once_and_rules_only_its_own_layer_kinds(
    tmp_path: Path,
) -> None:
    """Gemma-3 in a plan file: a shape too large for the device is skipped for both kinds of layers with one note, and
    a table that sets a window of its own (a what-if, no layer the engine runs) is not held to the model's kinds."""
    cfg = f'[model]\nconfig = "{MODELS / "gemma-3-4b-it.json"}"\n'
    f = tmp_path / "big.toml"
    f.write_text(cfg + '[[attention]]\nkv_layout = "NHD"\n[[attention.decode]]\nbatch = [1, 512]\ncontext = [131072]\n')
    plan = plan_from_toml(f, device=simulated("h100"))
    skipped = [n for n in plan.notes if n.startswith("skipped")]
    assert skipped == ["skipped decode batch 512 x 131072 tokens: its KV cache does not fit in memory"], plan.notes
    g = tmp_path / "whatif.toml"
    table = '[[attention]]\nkv_layout = "NHD"\n{}[[attention.decode]]\nbatch = [1]\ncontext = [4096]\n'
    g.write_text(cfg + table.format("sliding_window = 512\n") + table.format(""))
    plan = plan_from_toml(g, device=simulated("h100"))
    others = {
        i.workload.spec.sliding_window: [s.sliding_window for s in plan.other_layer_specs(i.workload.spec)]
        for i in plan.items
    }
    assert plan.layer_windows == (1024, None)
    assert others == {512: [], 1024: [None], None: [1024]}, others


def test_example_toml_plan() -> None:
    plan = plan_from_toml(ROOT / "examples" / "plan.toml")
    assert plan.name == "llama-3.1-8b-example" and plan.time_cap_s == 2.0
    spec = plan.items[0].workload.spec
    assert (spec.num_heads, spec.num_kv_heads, spec.head_size) == (32, 8, 128)
    assert {i.workload.phase for i in plan.items} == {"decode", "prefill", "mixed"}
    assert any(i.level == 1 for i in plan.items)


def test_toml_with_several_specs_and_ragged_lengths(tmp_path: Path) -> None:
    f = tmp_path / "p.toml"
    f.write_text("""
[[attention]]
num_heads = 8
num_kv_heads = 2
head_size = 64
backends = ["TORCH_SDPA:math"]
[[attention.decode]]
batch = [4]
context = [256]
ragged = true
[[attention]]
num_heads = 8
num_kv_heads = 2
head_size = 64
kv_layout = "HND"
[[attention.prefill]]
chunk = [32]
prefix = [0, 64]
""")
    plan = plan_from_toml(f)
    assert len(plan.items) == 4  # the first table's auto layout is measured as NHD and as HND
    assert [i.workload.spec.kv_layout for i in plan.items] == ["NHD", "HND", "HND", "HND"]
    ragged = plan.items[0].workload
    assert ragged.context_lens and len(ragged.context_lens) == 4 and max(ragged.context_lens) <= 256
    assert plan.items[0].backends == plan.items[1].backends == ("TORCH_SDPA:math",)


@pytest.mark.parametrize(
    "text, words",
    [
        ("[surprise]\nx = 1\n", r"unknown key\(s\) surprise"),
        ('[model]\ntp = "x"\n', r"\[model\] tp must be integers >= 1, got 'x'"),
        ("[model]\ntpp = 2\n", r"\[model\]: unknown key\(s\) tpp"),
        ("[[attention]]\nnum_heads = 8\nnum_kv_heads = 2\nhead_size = 64\nheads = 3\n", r"unknown key\(s\) heads"),
        (
            "[[attention]]\nnum_heads = 8\nnum_kv_heads = 2\nhead_size = 64\n[[attention.decode]]\nbatchs = [1]\n",
            r"\[\[attention.decode\]\]: unknown key\(s\) batchs",
        ),
        (
            '[[attention]]\nnum_heads = 8\nnum_kv_heads = 2\nhead_size = 64\n[[attention.mixed]]\nbatch = "x"\n',
            "mixed.batch",
        ),
        ("[all2all]\nep_size = 8\nnum_experts = 64\ntopk = 2\nhidden = 1\n", r"\[all2all\]: unknown key\(s\) hidden"),
        (
            'time_cap_s = "fast"\n[all2all]\nep_size = 8\nnum_experts = 64\ntopk = 2\nhidden_size = 64\n',
            "time_cap_s must be",
        ),
        ("[[attention]]\nnum_heads = 8\n", "missing"),
        (
            "[[attention]]\nnum_heads = 8\nnum_kv_heads = 2\nhead_size = 64\n[[attention.decode]]\nbatch = [0]\n",
            "must be integers >= 1",
        ),
        ("not toml [", "not valid TOML"),
    ],
)
def test_bad_plan_files(tmp_path: Path, text: str, words: str) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(InvalidSpecError, match=words) as err:
        plan_from_toml(f)
    assert str(f) in str(err.value)  # the message names the file


def test_bad_plan_file_on_the_cli_exits_2_without_a_traceback(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from hwtune.cli.main import app

    f = tmp_path / "plan.toml"
    f.write_text('[model]\ntp = "x"\n')
    res = CliRunner().invoke(app, ["tune", "--plan", str(f), "--dry-run"])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and "[model] tp" in res.output


def test_refinements_between_disagreeing_neighbours_come_first() -> None:
    spec = AttentionSpec(8, 2, 64)
    plan = plan_from_model(MODELS / "llama-3.1-8b.json", device=simulated("h100"))
    coarse = [i for i in plan.items if i.level == 0 and i.workload.phase == "decode"]
    refine = [i for i in plan.items if i.level == 1 and i.workload.phase == "decode"]
    del spec

    def rec(item, backend):
        w = item.workload
        return MeasurementRecord(
            kind="attention",
            workload=w.to_dict(),
            workload_key=w.key(),
            backend=backend,
            tactic="t",
            status="ok",
            stats=LatencyStats.from_samples([1.0]),
        )

    # small batches won by A, large by B: the crossover sits between batch 16 and 256
    records = [rec(c, "A" if c.workload.batch < 100 else "B") for c in coarse]
    ordered = order_refinements(refine, coarse, records)
    first = ordered[0].workload
    assert informative(ordered[0], coarse, {r.workload_key: (r.backend, r.tactic, 1.0) for r in records})
    assert first.batch in (64, 512) or first.batch > 16
    flags = [informative(i, coarse, {r.workload_key: (r.backend, r.tactic, 1.0) for r in records}) for i in ordered]
    assert flags == sorted(flags, reverse=True)  # every informative point before every uninformative one


def test_duplicate_workloads_merge_their_backends(tmp_path: Path) -> None:
    f = tmp_path / "dup.toml"
    f.write_text("""
[[attention]]
num_heads = 8
num_kv_heads = 2
head_size = 64
backends = ["FLASHINFER"]
[[attention.decode]]
batch = [4]
context = [256]
[[attention.decode]]
batch = [4]
context = [256]
backends = ["FLEX_ATTENTION"]
level = 1
""")
    plan = plan_from_toml(f)
    assert len(plan.items) == 2  # one per layout (auto: NHD and HND)
    for item in plan.items:
        assert item.backends == ("FLASHINFER", "FLEX_ATTENTION") and item.level == 0


def test_quick_on_the_cpu_measures_the_backends_that_run_there() -> None:
    """--quick once planned only GPU backends on a CPU machine, measured nothing and exited 0."""
    from hwtune.core import catalogue

    plan = default_plan(quick=True, device=CPU_PROFILE)
    # HWTUNE_TORCH_MLA measures MLA specs only (plan_candidates drops it for others)
    assert plan.backends and set(plan.backends) == {"TORCH_SDPA", "FLEX_ATTENTION", "HWTUNE_TORCH_MLA"}
    for name in plan.backends:
        assert "cpu" in catalogue.get("attention", name).rules.device_types
    assert any("quick on the CPU" in n for n in plan.notes)
    assert default_plan(quick=True, device=simulated("h100")).backends == QUICK_BACKENDS


def test_estimates_count_compilation_per_shape_for_torch_compile_backends() -> None:
    """FLEX_ATTENTION compiles per shape: its first compile estimate once, then its recompile per later workload;
    a JIT kernel's once."""
    from hwtune.core import catalogue
    from hwtune.tuner.estimate import candidate_seconds, estimate_seconds

    plan = default_plan(device=simulated("h100"))
    n = sum(1 for i in plan.items if i.kind == "attention")
    flex = estimate_seconds(plan, simulated("h100"), ("FLEX_ATTENTION",))
    fi = estimate_seconds(plan, simulated("h100"), ("FLASHINFER:fa2",))
    per_item = candidate_seconds(plan.time_cap_s)
    tactic = catalogue.get("attention", "FLEX_ATTENTION").tactic("compiled")
    assert tactic.recompile_s is not None and 0 < tactic.recompile_s < tactic.compile_s
    expected = tactic.compile_s + (n - 1) * tactic.recompile_s + n * per_item
    assert expected - 1 <= flex <= expected + 1
    assert fi < flex


def test_kv_layout_auto_plans_every_declared_layout_and_a_requested_one_only_itself() -> None:
    h100 = simulated("h100")
    auto = plan_from_model(MODELS / "llama-3.1-8b.json", device=h100)
    layouts = [i.workload.spec.kv_layout for i in auto.items if i.workload.kind == "attention"]
    assert set(layouts) == {"NHD", "HND"} and layouts.count("NHD") == layouts.count("HND")
    assert any("measuring the NHD and HND layouts" in n for n in auto.notes)
    hnd = plan_from_model(MODELS / "llama-3.1-8b.json", device=h100, attention_overrides={"kv_layout": "HND"})
    assert {i.workload.spec.kv_layout for i in hnd.items if i.workload.kind == "attention"} == {"HND"}
    quick = plan_from_model(MODELS / "llama-3.1-8b.json", device=h100, quick=True)
    assert {i.workload.spec.kv_layout for i in quick.items if i.workload.kind == "attention"} == {"NHD"}


def test_spec_options_shape_the_default_plan_and_are_refused_with_a_plan_file() -> None:
    """Without --model the command line's spec options apply to the default plan; a plan file states its spec
    itself, so they are an error there rather than silently ignored."""
    given = dict(kv_cache_dtype="fp8", block_size=None, kv_layout="HND", dcp_size=1, spec_tokens=0)
    plan = build_plan(None, None, attention_overrides=given)
    assert {(i.workload.spec.kv_cache_dtype, i.workload.spec.kv_layout) for i in plan.items} == {("fp8_e4m3", "HND")}
    with pytest.raises(InvalidSpecError, match="--dcp, --kv-cache-dtype: a plan file states its spec itself"):
        build_plan(None, ROOT / "examples" / "plan.toml", attention_overrides=dict(kv_cache_dtype="fp8", dcp_size=2))
    defaults = dict(kv_cache_dtype="auto", kv_layout="auto", dcp_size=1, block_size=None)
    assert build_plan(None, ROOT / "examples" / "plan.toml", attention_overrides=defaults).items


def test_the_plan_reaches_the_edge_of_the_engines_range() -> None:
    """Llama-2 serves 4096 tokens: decode is measured at 4096 (not only up to 2048, the grid's last point below
    it), and each prefill chunk on the longest prefix the range allows (a short chunk on a long prefix is its own
    regime, and beyond the measured range selection only extrapolates)."""
    plan = plan_from_model(ROOT / "tests/data/models/llama-2-7b-hf.json", attention_overrides={"kv_layout": "NHD"})
    decode = {(i.workload.batch, i.workload.context_len) for i in plan.items if i.workload.phase == "decode"}
    prefill = {(i.workload.query_len, i.workload.context_len) for i in plan.items if i.workload.phase == "prefill"}
    assert {(1, 4096), (64, 4096)} <= decode and max(c for _b, c in decode) == 4096
    assert {(128, 4096), (512, 4096), (2048, 4096), (128, 128)} <= prefill
    assert all(c <= 4096 for _q, c in prefill)


def test_a_plan_says_it_leaves_out_the_full_attention_layers_of_a_mixed_model() -> None:
    """gpt-oss alternates 128-token windowed layers with full-attention ones; the plan measures the windowed spec, and
    must say that the other half of the layers is not in the ranking."""
    notes = plan_from_model(MODELS / "gpt-oss-120b.json", tp=8, kinds=("attention",), device=simulated("h100")).notes
    assert any("18 of 36 layers attend the whole context" in n for n in notes), notes
    llama = plan_from_model(MODELS / "llama-3.1-8b.json", kinds=("attention",), device=simulated("h100")).notes
    assert not any("whole context" in n for n in llama)


def test_a_model_mixing_windowed_and_full_attention_layers_measures_both_kinds() -> None:
    plan = plan_from_model(MODELS / "gpt-oss-120b.json", tp=8, kinds=["attention"], device=simulated("h100"))
    windows = Counter(i.workload.spec.sliding_window for i in plan.items)
    assert set(windows) == {128, None} and windows[128] == windows[None]
    assert sum("measures both kinds" in n for n in plan.notes) == 1
    assert len(plan.notes) == len(set(plan.notes))
    llama = plan_from_model(MODELS / "llama-3.1-8b.json", kinds=["attention"], device=simulated("h100"))
    assert {i.workload.spec.sliding_window for i in llama.items} == {None}


def test_a_backend_that_cannot_serve_every_layer_kind_is_not_measured_on_any() -> None:
    """Gemma-3 mixes 1024-token windowed layers with full-attention ones, and the engine runs one backend for all:
    hwtune's Triton kernel (no sliding window) is valid on the full-attention layers alone, so the plan neither times
    nor warms it up there, and the estimate does not count it; FlashInfer serves both kinds and is planned on both."""
    from dataclasses import replace

    from hwtune.probes.attention.measure import plan_candidates
    from hwtune.tuner.estimate import candidate_seconds, estimate_seconds, warmup_seconds
    from hwtune.tuner.warmup import jobs

    h100 = simulated("h100")
    plan = plan_from_model(MODELS / "gemma-3-4b-it.json", kinds=["attention"], device=h100)
    assert plan.layer_windows == (1024, None)
    full = next(i.workload for i in plan.items if i.workload.spec.sliding_window is None)
    assert plan.other_layer_specs(full.spec) == [replace(full.spec, sliding_window=1024)]
    planned = plan_candidates(full, h100, assume_installed=True, other_layers=plan.other_layer_specs(full.spec))
    triton = [c for c in planned if c.backend == "HWTUNE_TRITON_ATTN"]
    assert triton and not any(c.runnable for c in triton)
    assert all("cannot serve this model's 1024-token sliding-window layers" in c.reasons[0] for c in triton)
    assert any(c.runnable for c in planned if c.backend == "FLASHINFER")
    # the same items without the other layer kind: the Triton kernel is planned, warmed up and estimated there
    single = replace(plan, layer_windows=())
    warmed = {c.backend for _w, c in jobs(plan, h100, None, assume_installed=True)}
    assert "HWTUNE_TRITON_ATTN" not in warmed and "FLASHINFER" in warmed
    assert "HWTUNE_TRITON_ATTN" in {c.backend for _w, c in jobs(single, h100, None, assume_installed=True)}
    loop = [estimate_seconds(p, h100) - warmup_seconds(p, h100) for p in (plan, single)]  # the measurement loop
    fulls = [i.workload for i in single.items if i.workload.spec.sliding_window is None]
    timed = sum(
        c.runnable and c.backend == "HWTUNE_TRITON_ATTN"
        for w in fulls
        for c in plan_candidates(w, h100, assume_installed=True)
    )
    assert timed >= len(fulls) and loop[1] - loop[0] >= timed * candidate_seconds(plan.time_cap_s)
    assert plan.digest() != single.digest() and "layer_windows" in plan.to_dict()
    llama = plan_from_model(MODELS / "llama-3.1-8b.json", kinds=["attention"], device=h100)
    assert llama.layer_windows == () and "layer_windows" not in llama.to_dict()


def test_the_estimate_runs_the_warm_up_in_parallel_and_compiles_a_module_once() -> None:
    """The warm-up compiles in parallel processes (its wall time is the busiest process's), a JIT tactic's module once
    for every phase and layout, and what it compiled is not charged again in the measurement loop."""
    from hwtune.core import catalogue
    from hwtune.tuner.estimate import WARM_JOB_S, candidate_seconds, estimate_seconds, warmup_seconds
    from hwtune.tuner.warmup import jobs

    h100 = simulated("h100")
    plan = plan_from_model(MODELS / "llama-3.1-8b.json", device=h100)  # both layouts, three phases
    fa3 = ("FLASHINFER:fa3",)
    n_jobs = len(jobs(plan, h100, fa3, assume_installed=True))
    compile_s = catalogue.get("attention", "FLASHINFER").tactic("fa3").compile_s
    assert n_jobs >= 4
    assert warmup_seconds(plan, h100, fa3, parallel=1) == compile_s + (n_jobs - 1) * WARM_JOB_S
    assert warmup_seconds(plan, h100, fa3, parallel=4) == compile_s  # the repeats run beside it
    n = sum(1 for i in plan.items if i.kind == "attention")
    assert estimate_seconds(plan, h100, fa3) == math.ceil(compile_s + n * candidate_seconds(plan.time_cap_s))
    every = (None, 1), (None, 4)
    serial, parallel = (warmup_seconds(plan, h100, b, parallel=p) for b, p in every)
    assert parallel < serial / 2


def test_a_backend_that_pages_by_another_size_is_planned_at_it_unless_a_size_is_given() -> None:
    """DeepSeek-V3 on Hopper: FLASHMLA pages by 64 only, so with no block size given its (decode) workloads are planned
    at 64 too, for it alone and bounded by the run's backends; a given size plans that size only; where FLASHMLA is not
    valid (Blackwell: dense FlashMLA is Hopper-only), nothing is added (issue 19)."""
    from hwtune.tuner.schedule import narrowed

    cfg = MODELS / "deepseek-v3.json"
    plan = plan_from_model(cfg, tp=8, kinds=["attention"], device=simulated("h100"))
    at = Counter((i.workload.spec.block_size, i.workload.phase) for i in plan.items)
    assert at[64, "decode"] == at[16, "decode"] > 0 and at[16, "prefill"] > 0  # FLASHMLA measures decode only
    assert not at[64, "prefill"] and not at[64, "mixed"]
    extra = [i for i in plan.items if i.workload.spec.block_size == 64]
    assert all(i.backends == ("FLASHMLA",) and i.contenders for i in extra)
    assert any("FLASHMLA pages the KV cache by 64 tokens" in n for n in plan.notes)
    assert narrowed(extra[0], ("FLASHINFER_FA_MLA",)) == () and narrowed(extra[0], None) == ("FLASHMLA",)
    from dataclasses import replace

    from hwtune.tuner.estimate import estimate_seconds

    h100, others = simulated("h100"), ("FLASHINFER_FA_MLA", "HWTUNE_TRITON_MLA")
    without = replace(plan, items=[i for i in plan.items if i not in extra])
    assert estimate_seconds(plan, h100, others) == estimate_seconds(without, h100, others)  # bounded there too
    assert estimate_seconds(plan, h100) > estimate_seconds(without, h100)
    given = plan_from_model(
        cfg, tp=8, kinds=["attention"], device=simulated("h100"), attention_overrides={"block_size": 64}
    )
    assert {i.workload.spec.block_size for i in given.items} == {64} and not any(i.backends for i in given.items)
    blackwell = plan_from_model(cfg, tp=8, kinds=["attention"], device=simulated("b200"))
    assert {i.workload.spec.block_size for i in blackwell.items} == {16}
    dense = plan_from_model(MODELS / "llama-3.1-8b.json", kinds=["attention"], device=simulated("h100"))
    assert {i.workload.spec.block_size for i in dense.items} == {16}
