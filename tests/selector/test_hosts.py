"""Many hosts, one store: a faulty or hostile host cannot flip a choice (issue 16).

A failure under another fingerprint never rejects; within one fingerprint a single dissenting host among
three or more is outvoted and named in the notes / ``--explain`` / JSON; with two hosts, with two failing
hosts, or where nobody else measured the workload, a failure still rejects; timings are medians over hosts and
a discordant host's timings are left out (hwtune/selector/measured.py).
"""

import dataclasses
import json

import pytest
from typer.testing import CliRunner

from hwtune.cli.main import app
from hwtune.core.environment import SoftwareStack, current_environment
from hwtune.core.records import LatencyStats
from hwtune.core.types import AttentionWorkload
from hwtune.db.sqlite_direct import read_for_selection
from hwtune.db.store import Store
from hwtune.selector.api import _cached
from hwtune.selector.measured import gather
from tests.selector.test_measured import H100, SPEC, base, grid, rec, select

HONEST = ("node-a", "node-b")
HOSTS = ["--num-heads", "32", "--num-kv-heads", "8", "--head-size", "128", "--device", "h100", "--assume-installed"]
W = AttentionWorkload(SPEC, "decode", 64, 8192)  # a workload every honest host measured
WRONG = "relative L2 error 0.4 exceeds 0.02"


@pytest.fixture()
def url(tmp_path):
    url = f"sqlite:///{tmp_path / 'hosts.db'}"
    Store.open(url).close()
    yield url
    _cached.cache_clear()


def write(url, records) -> None:
    with Store.open(url) as s:
        s.write(records)


def on(host, records, scale=1.0):
    """``records`` as written by ``host``, its latencies multiplied by ``scale``."""
    return [
        dataclasses.replace(
            r,
            host=host,
            run_id=f"run-{host}",
            stats=LatencyStats.from_samples([r.stats.median_us * scale] * 3) if r.stats else None,
        )
        for r in records
    ]


def wrong(host, w=W, backend="FLASHINFER", tactic="xqa", status="wrong_answer"):
    msg = WRONG if status == "wrong_answer" else "illegal memory access"
    return rec(w, backend, tactic, 0, status=status, host=host, message=msg)


def honest(url, hosts=HONEST) -> None:
    write(url, [r for h in hosts for r in on(h, grid(base))])


def hostile() -> list:
    """evil: a wrong answer for every FLASHINFER candidate the honest hosts measured (they measured FLASHINFER
    fastest), FLASH_ATTN 100x faster at their shapes, and 1000x faster at decode mix shapes only it measured."""
    lies = [
        dataclasses.replace(r, host="evil", run_id="run-evil", status="wrong_answer", stats=None, message=WRONG)
        for r in grid(base)
        if r.backend == "FLASHINFER"
    ]
    lies += on("evil", [r for r in grid(base) if r.backend == "FLASH_ATTN"], scale=0.01)
    private = [AttentionWorkload(SPEC, "decode", b, c) for b in (1, 4, 16, 64, 256) for c in (1024, 4096, 16384)]
    return lies + on("evil", [rec(w, "FLASH_ATTN", "fa3", base("FLASH_ATTN", "fa3", w)) for w in private], 0.001)


def test_honest_hosts_choose_flashinfer(url) -> None:
    """The baseline the hostile host tries to flip."""
    honest(url)
    sel = select(url)
    assert sel.backend == "FLASHINFER" and sel.ranked[1].backend == "FLASH_ATTN"
    assert not any("evil" in n for n in sel.notes)


def test_hostile_third_host_cannot_flip_the_choice_and_is_named(url) -> None:
    honest(url)
    write(url, hostile())
    sel = select(url)
    assert sel.backend == "FLASHINFER" and "FLASHINFER" not in sel.rejected
    assert sel.ranked[1].backend == "FLASH_ATTN"
    outvoted = [n for n in sel.notes if n.startswith("outvoted a single dissenting host: host evil")]
    assert len(outvoted) == 1 and "gave a wrong answer" in outvoted[0] and "(node-a, node-b)" in outvoted[0]
    assert "relative L2 error 0.4 exceeds 0.02" in outvoted[0]
    discordant = [n for n in sel.notes if n.startswith("host evil's FLASH_ATTN timings are not used")]
    assert len(discordant) == 1 and "100x faster than the hosts' median" in discordant[0]
    assert "its 15 shape(s) that no other host measured are left out too" in discordant[0]
    assert "failures recorded by host evil outvoted" in sel.ranked[0].detail
    assert "timings of host evil not used" in sel.ranked[1].detail
    assert any("host evil" in n for n in sel.to_dict()["notes"])


def test_explain_and_json_name_the_dissenting_host(url) -> None:
    honest(url)
    write(url, hostile())
    res = CliRunner().invoke(app, ["select", "attention", *HOSTS, "--db", url, "--explain"])
    assert res.exit_code == 0, res.output
    assert "note: outvoted a single dissenting host: host evil recorded 52 failure(s) of FLASHINFER" in res.stderr
    assert "note: host evil's FLASH_ATTN timings are not used" in res.stderr
    assert "attention backend for" in res.stderr and ": FLASHINFER (tactic" in res.stderr
    _cached.cache_clear()
    res = CliRunner().invoke(app, ["select", "attention", *HOSTS, "--db", url, "--json"])
    data = json.loads(res.stdout)
    assert data["backend"] == "FLASHINFER"
    assert any(n.startswith("outvoted a single dissenting host: host evil") for n in data["notes"])


def test_with_two_hosts_a_failure_still_rejects(url) -> None:
    """Also when the failing host measured the same candidate correct in another run: it does not outvote itself."""
    honest(url, hosts=("node-a",))
    write(url, [wrong("evil"), dataclasses.replace(rec(W, "FLASHINFER", "xqa", 30.0, host="evil"), run_id="run-2")])
    sel = select(url)
    assert sel.backend == "FLASH_ATTN"
    (reason,) = sel.rejected["FLASHINFER"]
    assert "gave a wrong answer on decode batch 64 x 8192 in this environment (host evil" in reason
    assert "host node-a measured it correct there, too few to outvote it" in reason
    assert not any("outvoted a single" in n for n in sel.notes)


def test_two_failing_hosts_reject_however_many_agree(url) -> None:
    honest(url, hosts=("node-a", "node-b", "node-c"))
    write(url, [wrong("evil"), wrong("faulty", AttentionWorkload(SPEC, "decode", 4, 512), status="crashed")])
    sel = select(url)
    assert sel.backend == "FLASH_ATTN"
    assert any("crashed on decode batch 4 x 512" in r and "(host faulty" in r for r in sel.rejected["FLASHINFER"])
    assert all("2 hosts recorded failures of FLASHINFER: only one is outvoted" in r for r in sel.rejected["FLASHINFER"])


def test_a_failure_nobody_else_measured_stands(url) -> None:
    """Fail closed: where the other hosts did not measure a workload, one host's crash there is the evidence."""
    honest(url)
    write(url, [wrong("evil", AttentionWorkload(SPEC, "decode", 512, 8192), status="crashed")])
    sel = select(url)
    assert sel.backend == "FLASH_ATTN"
    assert sel.rejected["FLASHINFER"] == (
        "FLASHINFER tactic xqa crashed on decode batch 512 x 8192 in this environment"
        f" (host evil, {sel.rejected['FLASHINFER'][0].split('host evil, ')[1][:10]}): illegal memory access",
    )


def test_a_failure_under_another_fingerprint_never_rejects(url) -> None:
    honest(url, hosts=("node-a",))
    other = current_environment(H100).__class__(H100, dataclasses.replace(SoftwareStack.current(), flashinfer="0.6.11"))
    foreign = [
        dataclasses.replace(wrong(h, status=s), environment=other.fingerprint(), environment_hash=other.hash())
        for h, s in (("evil", "wrong_answer"), ("faulty", "crashed"))
    ]
    write(url, foreign)
    sel = select(url)
    assert sel.backend == "FLASHINFER" and "FLASHINFER" not in sel.rejected
    assert any(
        n.startswith("ignored 2 measurement(s) from another environment: measured with flashinfer 0.6.11")
        for n in sel.notes
    )


def test_honest_spread_between_hosts_is_not_discordant(url) -> None:
    """Three honest hosts 25 % apart all count: every shared point is the median of three."""
    write(url, on("node-a", grid(base), 0.8) + on("node-b", grid(base)) + on("node-c", grid(base), 1.25))
    sel = select(url)
    assert sel.backend == "FLASHINFER" and not any("not used" in n for n in sel.notes)
    rows, fps, _ = read_for_selection(url, SPEC.key(), "attention")
    env = current_environment(H100)
    ev = gather(rows, fps, env.hash(), env.fingerprint())
    assert {p.hosts for pts in ev.points.values() for p in pts} == {3}


def test_timings_are_the_median_over_hosts(url, tmp_path) -> None:
    """A host within the trusted factor still cannot move a shape's latency: the median of three is a middle one
    (a mean of 1.0, 1.0 and 0.55 would make FLASH_ATTN cheapest)."""
    honest(url)
    alone = select(url).ranked[1]
    write(url, on("evil", [r for r in grid(base) if r.backend == "FLASH_ATTN"], scale=0.55))
    sel = select(url)
    assert sel.backend == "FLASHINFER" and not any("not used" in n for n in sel.notes)
    assert sel.ranked[1].backend == alone.backend == "FLASH_ATTN"
    assert sel.ranked[1].latency_us == pytest.approx(alone.latency_us)
