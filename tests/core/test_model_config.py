"""Real config.json files of public model families (tests/data/models, sources in SOURCES.md)."""

from pathlib import Path

import pytest

from hwtune.core.errors import InvalidSpecError
from hwtune.core.model_config import all2all_spec, attention_spec, load_model_config, parse_model_config
from hwtune.selector.api import select_attention

MODELS = Path(__file__).parent.parent / "data" / "models"


@pytest.mark.parametrize(
    "name, heads, kv, head, hidden",
    [
        ("llama-3.1-8b", 32, 8, 128, 4096),  # dense GQA
        ("llama-3.3-70b-instruct", 64, 8, 128, 8192),
        ("llama-2-7b-hf", 32, 32, 128, 4096),  # MHA
        ("allam-7b-instruct-preview", 32, 32, 128, 4096),
        ("gemma-2-9b-it", 16, 8, 256, 3584),  # head size 256 (not hidden/heads = 224)
        ("gemma-3-4b-it", 8, 4, 256, 2560),  # nested text_config, transformers defaults
        ("mixtral-8x7b-v0.1", 32, 8, 128, 4096),  # MoE
        ("qwen3-30b-a3b", 32, 4, 128, 2048),  # MoE, head_dim 128 != hidden/heads
        ("gpt-oss-120b", 64, 8, 64, 2880),  # sinks
        ("qwen2.5-7b-instruct", 28, 4, 128, 3584),
        ("qwen2.5-vl-7b-instruct", 28, 4, 128, 3584),
        ("chatglm2-6b", 32, 2, 128, 4096),  # multi_query_group_num, kv_channels
        ("phi-3.5-vision-instruct", 32, 32, 96, 3072),  # head size 96, MHA
    ],
)
def test_heads_parsed(name: str, heads: int, kv: int, head: int, hidden: int) -> None:
    m = load_model_config(MODELS / f"{name}.json")
    assert (m.num_heads, m.num_kv_heads, m.head_size, m.hidden_size) == (heads, kv, head, hidden)


def test_model_specific_fields() -> None:
    gemma2 = load_model_config(MODELS / "gemma-2-9b-it.json")
    assert gemma2.logits_soft_cap == 50.0 and gemma2.sliding_window == 4096
    assert load_model_config(MODELS / "qwen2.5-7b-instruct.json").sliding_window is None  # use_sliding_window false
    phi = load_model_config(MODELS / "phi-3.5-vision-instruct.json")  # window 131072 = every position: no window
    assert phi.sliding_window is None and phi.max_position_embeddings == 131072
    oss = load_model_config(MODELS / "gpt-oss-120b.json")
    assert oss.sinks and oss.num_experts == 128 and oss.topk == 4
    assert (oss.sliding_window, oss.full_attention_layers, oss.num_layers) == (128, 18, 36)  # layer_types alternate
    assert (gemma2.full_attention_layers, gemma2.num_layers) == (21, 42)  # no layer_types: Gemma-2's odd layers
    gemma3 = load_model_config(MODELS / "gemma-3-4b-it.json")  # no layer_types: every 6th layer (the default)
    assert (gemma3.sliding_window, gemma3.full_attention_layers, gemma3.num_layers) == (1024, 5, 34)
    assert load_model_config(MODELS / "llama-3.1-8b.json").full_attention_layers is None  # no window at all
    mix = load_model_config(MODELS / "mixtral-8x7b-v0.1.json")
    assert (mix.num_experts, mix.topk) == (8, 2)
    qwen3 = load_model_config(MODELS / "qwen3-30b-a3b.json")
    assert (qwen3.num_experts, qwen3.topk) == (128, 8)
    assert load_model_config(MODELS / "llama-3.1-8b.json").num_experts is None


def test_deepseek_v3_is_mla_and_moe() -> None:
    m = load_model_config(MODELS / "deepseek-v3.json")
    assert m.use_mla and (m.kv_lora_rank, m.qk_rope_head_dim, m.qk_nope_head_dim, m.v_head_dim) == (512, 64, 128, 128)
    assert (m.num_experts, m.topk, m.hidden_size) == (256, 8, 7168)
    spec = attention_spec(m, tp=8)
    assert (spec.num_heads, spec.num_kv_heads, spec.head_size, spec.use_mla) == (16, 1, 576, True)
    a2a = all2all_spec(m, ep_size=8, quant_dtype="fp8")
    assert (a2a.num_experts, a2a.topk, a2a.hidden_size, a2a.quant_dtype) == (256, 8, 7168, "fp8")


@pytest.mark.parametrize("tp, heads, kv", [(1, 64, 8), (2, 32, 4), (8, 8, 1), (16, 4, 1)])
def test_tp_divides_heads_and_replicates_kv(tp: int, heads: int, kv: int) -> None:
    spec = attention_spec(load_model_config(MODELS / "llama-3.3-70b-instruct.json"), tp=tp)
    assert (spec.num_heads, spec.num_kv_heads) == (heads, kv)


def test_tp_that_does_not_divide_heads() -> None:
    with pytest.raises(InvalidSpecError, match="28 attention heads cannot be split over --tp 8"):
        attention_spec(load_model_config(MODELS / "qwen2.5-7b-instruct.json"), tp=8)


def test_no_moe_no_all2all() -> None:
    with pytest.raises(InvalidSpecError, match="has no MoE fields"):
        all2all_spec(load_model_config(MODELS / "llama-3.1-8b.json"), ep_size=8)


def test_bad_configs(tmp_path: Path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(InvalidSpecError, match="not valid JSON"):
        load_model_config(tmp_path)
    with pytest.raises(InvalidSpecError, match="no attention head count"):
        parse_model_config({"model_type": "mystery"})


def test_models_select_end_to_end() -> None:
    gemma = attention_spec(load_model_config(MODELS / "gemma-2-9b-it.json"))
    sel = select_attention(gemma, device="sm90", assume_installed=True)
    assert sel.backend == "FLASH_ATTN"  # soft-cap + sliding window + head 256
    assert [r.backend for r in sel.ranked] == ["FLASH_ATTN", "FLASHINFER", "TRITON_ATTN"]  # vLLM 0.33.0's rules
    assert "soft cap" in sel.rejected["FLEX_ATTENTION"][0]  # vLLM takes it, then fails at start: rejected up front
    own = select_attention(gemma, device="sm90", assume_installed=True, engine=None)
    assert "HWTUNE_TRITON_ATTN" in own.rejected  # hwtune's kernel declares neither soft-cap nor sliding window
    oss = attention_spec(load_model_config(MODELS / "gpt-oss-120b.json"))
    assert select_attention(oss, device="sm100", assume_installed=True).tactic == "trtllm-gen"


# --- the activation dtype a checkpoint's quantization dispatches to the experts ------------------------------


@pytest.mark.parametrize(
    "path, method, dispatched",
    [
        ("qwen3-30b-a3b-nvfp4", "modelopt NVFP4", "nvfp4"),  # folder: config.json + ModelOpt's hf_quant_config.json
        ("qwen3-30b-a3b-nvfp4/config.json", "modelopt NVFP4", "nvfp4"),  # the file: its sibling is read too
        ("deepseek-v3.json", "fp8", "fp8"),  # quantization_config {quant_method: fp8, activation_scheme: dynamic}
        ("gpt-oss-120b.json", "mxfp4, weights only", "bf16"),  # mxfp4 weights, bf16 activations
        ("qwen3-30b-a3b.json", None, "bf16"),  # not quantized: the model's own dtype
        ("mixtral-8x7b-v0.1.json", None, "bf16"),
    ],
)
def test_dispatch_dtype_of_real_checkpoints(path: str, method: str | None, dispatched: str) -> None:
    from hwtune.core.model_config import dispatch_dtype

    m = load_model_config(MODELS / path)
    assert m.quant_method == method
    assert dispatch_dtype(m)[0] == dispatched
    if m.is_moe:
        assert all2all_spec(m, 2).quant_dtype == dispatched  # the all2all spec follows the checkpoint
        assert all2all_spec(m, 2, quant_dtype="fp8").quant_dtype == "fp8"  # unless told otherwise


QWEN_MOE = {"model_type": "qwen3_moe", "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128}
QWEN_MOE |= {"hidden_size": 2048, "num_experts": 128, "num_experts_per_tok": 8, "torch_dtype": "bfloat16"}
NVFP4_ACTS = {"num_bits": 4, "type": "float", "group_size": 16}


@pytest.mark.parametrize(
    "quantization, dispatched, known",
    [
        ({"quant_method": "modelopt", "quant_algo": "NVFP4", "producer": {"name": "modelopt"}}, "nvfp4", True),
        ({"quant_method": "modelopt_fp4"}, "nvfp4", True),
        ({"quant_method": "modelopt", "quant_algo": "FP8"}, "fp8", True),
        ({"quant_method": "modelopt", "quant_algo": "W4A16_NVFP4"}, "bf16", True),  # weights only
        (
            {
                "quant_method": "modelopt",
                "quant_algo": "MIXED_PRECISION",
                "quantized_layers": {
                    "model.layers.0.self_attn.qkv_proj": {"quant_algo": "FP8"},
                    "model.layers.0.mlp.experts": {"quant_algo": "NVFP4", "group_size": 16},
                },
            },
            "nvfp4",  # the experts' algorithm
            True,
        ),
        (
            {
                "quant_method": "compressed-tensors",
                "format": "nvfp4-pack-quantized",
                "config_groups": {
                    "group_0": {"targets": ["Linear"], "weights": NVFP4_ACTS, "input_activations": NVFP4_ACTS}
                },
            },
            "nvfp4",
            True,
        ),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {
                    "attn": {"targets": ["re:.*self_attn.*"], "input_activations": {"num_bits": 8, "type": "float"}},
                    "moe": {"targets": ["re:.*mlp.experts.*"], "weights": NVFP4_ACTS, "input_activations": None},
                },
            },
            "bf16",  # the expert group quantizes weights only
            True,
        ),
        ({"quant_method": "awq", "bits": 4}, "bf16", True),
        ({"quant_method": "fbgemm_fp8"}, "fp8", True),
        ({"quant_method": "exotic_int3"}, "bf16", False),  # unknown: the model's dtype, and the note says so
    ],
)
def test_dispatch_dtype_of_quantization_configs(quantization: dict, dispatched: str, known: bool) -> None:
    from hwtune.core.model_config import dispatch_dtype

    m = parse_model_config({**QWEN_MOE, "quantization_config": quantization})
    dtype, why = dispatch_dtype(m)
    assert dtype == dispatched
    assert ("does not know" not in why) is known
    if not known:
        assert "exotic_int3" in why and "--quant-dtype" in why


def test_a_bad_hf_quant_config_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text((MODELS / "qwen3-30b-a3b.json").read_text())
    (tmp_path / "hf_quant_config.json").write_text("{not json")
    with pytest.raises(InvalidSpecError, match="hf_quant_config.json is not valid JSON"):
        load_model_config(tmp_path)
