"""The selection service over HTTP: the library's answers and errors, the store's listings, and the 4xx rules."""

from __future__ import annotations

import threading

import pytest

import hwtune
from hwtune.core.errors import BackendNotValidError, InvalidSpecError
from hwtune.selector.api import clear_cache
from tests.serve.conftest import A2A_BODY, BODY, SPEC


def library(kind: str, store_path, body: dict) -> hwtune.Selection:
    clear_cache()
    call = hwtune.select_attention if kind == "attention" else hwtune.select_all2all
    spec = (hwtune.AttentionSpec if kind == "attention" else hwtune.All2AllSpec)(**body["spec"])
    options = {k: v for k, v in body.items() if k not in ("spec", "explain")}
    return call(spec, db=str(store_path), distributed=False, **options)


def test_attention_answer_is_the_library_selection(client, store_path) -> None:
    got = client.post("/v1/select/attention", json={**BODY, "explain": True})
    assert got.status_code == 200, got.text
    data = got.json()
    want = library("attention", store_path, BODY)
    assert want.ranked[0].source in ("measured", "interpolated")  # the store was read: a measured answer
    assert {k: data[k] for k in want.to_dict()} == want.to_dict()
    assert data["explain"] == want.explain()
    assert data["per_phase"] == {"decode": "FLASHINFER", "prefill": "FLASHINFER"}
    assert data["static_fallback"] is False
    assert data["store"]["used"] == str(store_path) and "using configured store" in data["store"]["note"]


def test_every_option_of_the_library_call_is_taken(client, store_path) -> None:
    from hwtune.serve.requests import select_options

    assert {"device", "backend", "assume_installed", "max_num_seqs", "max_model_len", "profile"} <= set(
        select_options("attention")
    )
    if "engine" not in select_options("attention"):
        pytest.skip("this library call has no engine option")
    body = {**BODY, "engine": "sglang"}  # an option the service knows only from the library's signature
    data = client.post("/v1/select/attention", json=body).json()
    want = library("attention", store_path, body).to_dict()
    assert {k: data[k] for k in want} == want


@pytest.mark.parametrize(
    ("change", "field"), [({"engine": "tgi"}, "engine"), ({"engine_version": "0.1"}, "engine_version")]
)
def test_an_option_the_library_refuses_is_400_naming_it(client, store_path, change: dict, field: str) -> None:
    from hwtune.serve.requests import select_options

    if field not in select_options("attention"):
        pytest.skip(f"this library call has no {field} option")
    got = client.post("/v1/select/attention", json={**BODY, **change})
    with pytest.raises(InvalidSpecError) as raised:
        library("attention", store_path, {**BODY, **change})
    assert got.status_code == 400 and got.json()["error"]["field"] == field
    assert got.json()["error"]["message"] == f"{field}: {raised.value}"


def test_all2all_answer_is_the_library_selection(client, store_path) -> None:
    data = client.post("/v1/select/all2all", json=A2A_BODY).json()
    want = library("all2all", store_path, A2A_BODY).to_dict()
    assert {k: data[k] for k in want} == want and "explain" not in data
    assert data["static_fallback"] is False  # read, though nothing of this spec is stored


def test_warm_answers_come_from_the_cache(client, monkeypatch) -> None:
    body = {**BODY, "max_num_seqs": 64}
    first = client.post("/v1/select/attention", json=body)
    hits, computed = client.service.hits, []
    monkeypatch.setattr(client.service, "select", lambda request: computed.append(request))
    second = client.post("/v1/select/attention", json=body)
    assert second.content == first.content and client.service.hits == hits + 1
    assert computed == []  # answered on the event loop, no worker thread


def spec_error(**fields):
    """The library's own error for an AttentionSpec with ``fields`` changed."""
    return lambda: hwtune.AttentionSpec(**{**SPEC, **fields})


@pytest.mark.parametrize(
    ("change", "field", "library_error"),
    [
        ({"spec": {"num_kv_heads": 8, "head_size": 128}}, "spec.num_heads", None),  # missing
        ({"spec": {**SPEC, "num_heads": "32"}}, "spec.num_heads", None),  # wrong type, never coerced
        ({"spec": {**SPEC, "num_heads": 32.0}}, "spec.num_heads", None),
        ({"spec": {**SPEC, "sinks": 1}}, "spec.sinks", None),
        ({"spec": {**SPEC, "logits_soft_cap": "30"}}, "spec.logits_soft_cap", None),
        ({"spec": {**SPEC, "heads": 32}}, "spec.heads", None),  # unknown spec field
        ({"spec": {**SPEC, "num_kv_heads": 5}}, "spec.num_heads", spec_error(num_kv_heads=5)),  # the library's checks
        ({"spec": {**SPEC, "dtype": "fp9"}}, "spec.dtype", spec_error(dtype="fp9")),
        ({"spec": {**SPEC, "kv_cache_dtype": "fp9"}}, "spec.kv_cache_dtype", spec_error(kv_cache_dtype="fp9")),
        ({"spec": {**SPEC, "kv_layout": "NDH"}}, "spec.kv_layout", spec_error(kv_layout="NDH")),
        ({"spec": {**SPEC, "block_size": 0}}, "spec.block_size", spec_error(block_size=0)),
        ({"spec": [32, 8, 128]}, "spec", None),
        ({"backend": "FLASH_ATTENTION_4"}, "backend", None),  # unknown backend
        ({"backend": 3}, "backend", None),
        ({"device": "h101"}, "device", lambda: hwtune.select_attention(hwtune.AttentionSpec(**SPEC), device="h101")),
        ({"assume_installed": "yes"}, "assume_installed", None),
        ({"max_num_seqs": 0}, "max_num_seqs", None),
        ({"profile": "/etc/passwd"}, "profile", None),  # the service reads no files
        ({"explain": 1}, "explain", None),
        ({"colour": "blue"}, "colour", None),  # unknown top-level field
        ({"db": "/elsewhere.db"}, "db", None),  # the service's own store, never the client's
        ({"distributed": True}, "distributed", None),
    ],
)
def test_bad_input_is_400_naming_the_field(client, change: dict, field: str, library_error) -> None:
    got = client.post("/v1/select/attention", json={**BODY, **change})
    assert got.status_code == 400, got.text
    error = got.json()["error"]
    assert error["field"] == field
    name = field.split(".")[-1]
    assert any(form in error["message"] for form in (name, name.replace("_", "-"), name.replace("_", " "))), error
    if library_error is not None:
        with pytest.raises(InvalidSpecError) as raised:
            library_error()
        assert error["message"] == f"{field}: {raised.value}"  # the library's own words, after the field


def test_unknown_backend_uses_the_library_message(client) -> None:
    error = client.post("/v1/select/all2all", json={**A2A_BODY, "backend": "deepep"}).json()["error"]
    with pytest.raises(InvalidSpecError) as raised:
        hwtune.select_all2all(hwtune.All2AllSpec(8, 256, 8, 7168), device="b200", backend="deepep", db=False)
    assert error == {"type": "BadRequest", "message": f"backend: {raised.value}", "field": "backend", "exit_code": 2}


@pytest.mark.parametrize(
    ("content", "field"),
    [
        (b"", "body"),
        (b"{nope", "body"),
        (b"[1, 2]", "body"),
        (b"{}", "spec"),
        (b"\xff\xfe", "body"),
        (b"[" * 30000 + b"]" * 30000, "body"),  # nested past the JSON parser's recursion limit
    ],
)
def test_a_body_that_is_no_request_is_400(client, content: bytes, field: str) -> None:
    got = client.post("/v1/select/all2all", content=content)
    assert got.status_code == 400 and got.json()["error"]["field"] == field


def test_a_body_too_large_is_413(client) -> None:
    got = client.post("/v1/select/attention", json={**BODY, "pad": "x" * 70_000})
    assert got.status_code == 413 and got.json()["error"]["field"] == "body"


def test_all2all_spec_checks_name_the_field(client) -> None:
    bad = {**A2A_BODY, "spec": {**A2A_BODY["spec"], "topk": 300}}
    error = client.post("/v1/select/all2all", json=bad).json()["error"]
    assert error["field"] == "spec.topk" and "topk (300) cannot exceed num_experts (256)" in error["message"]
    bad = {**A2A_BODY, "max_model_len": 4096}  # an attention option
    assert client.post("/v1/select/all2all", json=bad).json()["error"]["field"] == "max_model_len"


def test_a_valid_backend_that_cannot_serve_is_422_with_the_library_error(client, store_path) -> None:
    body = {**BODY, "spec": {**SPEC, "dcp_size": 2}, "backend": "TORCH_SDPA"}
    got = client.post("/v1/select/attention", json=body)
    assert got.status_code == 422
    error = got.json()["error"]
    with pytest.raises(BackendNotValidError) as raised:
        library("attention", store_path, body)
    assert error["message"] == str(raised.value) and error["field"] == "backend"
    assert error["backend"] == "TORCH_SDPA" and error["valid"] == raised.value.valid and error["exit_code"] == 3


def test_environments_and_runs(client) -> None:
    envs = client.get("/v1/environments").json()["environments"]
    assert len(envs) == 1 and envs[0]["measurements"] == 79 and envs[0]["device_name"].startswith("NVIDIA H100")
    one = client.get(f"/v1/environments/{envs[0]['hash']}").json()
    assert one["hash"] == envs[0]["hash"] and one["fingerprint"]["device"]
    assert client.get("/v1/environments/feed").status_code == 404
    runs = client.get("/v1/runs").json()["runs"]
    assert [(r["id"], r["state"], r["measurements"]) for r in runs] == [
        ("run-node-a", "done", {"ok": 78, "unsupported": 1})
    ]
    assert "plan" not in runs[0]
    run = client.get("/v1/runs/run-node-a").json()
    assert run["plan"] == {"name": "grid"} and run["measurements"] == {"ok": 78, "unsupported": 1}
    assert client.get("/v1/runs?state=failed").json() == {"runs": []}
    missing = client.get("/v1/runs/run-nope")
    assert missing.status_code == 404 and "run-nope" in missing.json()["error"]["message"]


@pytest.mark.parametrize(
    ("query", "field"), [("limit=0", "limit"), ("limit=x", "limit"), ("state=lost", "state"), ("order=id", "order")]
)
def test_bad_run_queries_are_400(client, query: str, field: str) -> None:
    got = client.get(f"/v1/runs?{query}")
    assert got.status_code == 400 and got.json()["error"]["field"] == field


def test_health_unknown_paths_and_methods(client, store_path) -> None:
    health = client.get("/v1/health").json()
    assert health["status"] == "ok" and health["store"]["available"] and health["version"] == hwtune.__version__
    for method, path, status in [("GET", "/v1/select", 404), ("GET", "/v1/select/attention", 405)]:
        got = client.request(method, path)
        assert got.status_code == status and "POST /v1/select/attention" in got.json()["error"]["message"]


def test_concurrent_requests_all_answer(client) -> None:
    bodies = [{**BODY, "max_num_seqs": n} for n in (8, 16, 32, 128)] + [A2A_BODY]
    failures: list[str] = []

    def hammer(i: int) -> None:
        for j in range(10):
            body = bodies[(i + j) % len(bodies)]
            got = client.post(f"/v1/select/{'all2all' if 'ep_size' in body['spec'] else 'attention'}", json=body)
            if got.status_code != 200 or got.json()["static_fallback"]:
                failures.append(got.text)

    threads = [threading.Thread(target=hammer, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
