import pytest

from hwtune import All2AllSpec, AttentionSpec, AttentionWorkload, InvalidSpecError


def test_dtype_spellings_normalise_to_one_key() -> None:
    a = AttentionSpec(32, 8, 128, dtype="bf16", kv_cache_dtype="fp8")
    b = AttentionSpec(32, 8, 128, dtype="bfloat16", kv_cache_dtype="fp8_e4m3")
    assert a == b and a.key() == b.key()
    assert a.kv_cache_dtype == "fp8_e4m3"


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(num_heads=0, num_kv_heads=1, head_size=64), "num_heads must be a positive integer"),
        (dict(num_heads=32, num_kv_heads=-8, head_size=128), "num_kv_heads must be a positive integer"),
        (dict(num_heads=32, num_kv_heads=5, head_size=128), "must be a multiple of num_kv_heads"),
        (dict(num_heads=32, num_kv_heads=8, head_size=128, dtype="fp9"), "unknown dtype 'fp9'"),
        (dict(num_heads=32, num_kv_heads=8, head_size=128, kv_cache_dtype="int3"), "unknown kv-cache dtype"),
        (dict(num_heads=32, num_kv_heads=8, head_size=128, kv_layout="XYZ"), "unknown kv layout"),
        (dict(num_heads=32, num_kv_heads=8, head_size=128, spec_tokens=-1), "spec_tokens"),
        (dict(num_heads=32, num_kv_heads=8, head_size=128, logits_soft_cap=float("nan")), "soft_cap"),
        (
            dict(num_heads=16, num_kv_heads=1, head_size=500, use_mla=True, kv_lora_rank=512, qk_rope_head_dim=64),
            "kv_lora_rank + qk_rope_head_dim = 576",
        ),
    ],
)
def test_bad_attention_specs_say_what_is_wrong(kwargs: dict, words: str) -> None:
    with pytest.raises(InvalidSpecError, match=words.replace("(", r"\(").replace("+", r"\+")):
        AttentionSpec(**kwargs)


def test_bad_all2all_specs() -> None:
    with pytest.raises(InvalidSpecError, match="topk"):
        All2AllSpec(ep_size=2, num_experts=4, topk=8, hidden_size=1024)
    with pytest.raises(InvalidSpecError, match="divisible by ep_size"):
        All2AllSpec(ep_size=3, num_experts=8, topk=2, hidden_size=1024)
    with pytest.raises(InvalidSpecError, match="activation quant dtype"):
        All2AllSpec(ep_size=2, num_experts=8, topk=2, hidden_size=1024, quant_dtype="int4")


def test_workload_roundtrip_and_key_stability() -> None:
    spec = AttentionSpec(32, 8, 128)
    w = AttentionWorkload(spec, "mixed", batch=8, context_len=4096, query_len=512, num_prefill=2)
    again = AttentionWorkload.from_dict(w.to_dict())
    assert again == w and again.key() == w.key()
    assert AttentionWorkload(spec, "decode", 8, 4096).key() != w.key()


def test_workload_rejects_impossible_shapes() -> None:
    spec = AttentionSpec(32, 8, 128)
    with pytest.raises(InvalidSpecError, match="cannot exceed context_len"):
        AttentionWorkload(spec, "prefill", batch=1, context_len=16, query_len=64)
    with pytest.raises(InvalidSpecError, match="num_prefill"):
        AttentionWorkload(spec, "mixed", batch=4, context_len=64, num_prefill=0)
