"""The members of a real three-member DLedger group compared (``store_reader.broker.dledgerreplicas``)
against what the real group does (``compat/src/common/oracle/DLedgerGroupRun``, run by
``tests/oracle.py``; 4.9.7 pins DLedger 0.3.1.2, 5.5.1 pins 0.3.3.4):

1. write: the three elect a leader L; puts acked by all; follower B shut down; puts acked by L and A;
   A shut down; two puts L appends alone; L halted (kill -9);
2. A and B restart, A wins, five puts in the new term, both shut down cleanly: L now holds two
   entries of the old term where A and B hold the new term's;
3. the three restart and catch up.

On the stores as step 2 left them the project must give each member's log (end index and term,
every entry), who can win (A or B, never L), where the logs diverge, the entries on one member
only, and what the winner's comparison truncates: checked against the logs the real members
report after step 3.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from store_reader.broker import dledgerreplicas as dr
from store_reader import open_store

from dledgerstore import oracle_conf

pytestmark = [pytest.mark.slow, pytest.mark.oracle]

CONF = oracle_conf("oracleGroup")
IDS = ("n0", "n1", "n2")


def _log(reported: dict) -> dict[int, tuple]:
    """index -> (term, pos, size, body CRC-32) of a member's log as the real member reported it."""
    return {e[0]: tuple(e[1:]) for e in reported["entries"]}


@pytest.fixture(scope="module", params=["4.9.7", "5.5.1"])
def group(request, tmp_path_factory):
    """(members read from the stores step 2 left, the logs the real members reported at the end of
    the write (L) and of step 2 (A, B), step 3's report, L, A, B)."""
    from tests import oracle
    v = request.param
    base = tmp_path_factory.mktemp(f"dledger-group-{v}")
    (base / "broker.conf").write_text(CONF)
    g = base / "g"
    w = oracle.run(v, "oracle.DLedgerGroupRun", "write", g, base / "broker.conf", 30, 7)
    lead, a, b = w["leader"], w["a"], w["b"]
    r2 = oracle.run(v, "oracle.DLedgerGroupRun", "restart", g, base / "broker.conf", 5, f"{a},{b}")
    assert r2["caughtUp"] and r2["leader"] == a
    snap = base / "after-step-2"
    subprocess.run(["cp", "-a", "--sparse=always", str(g), str(snap)], check=True)
    members = [dr.read_member(n, open_store(snap / n, snap / f"{n}.group.conf", read_dledger=True)) for n in IDS]
    r3 = oracle.run(v, "oracle.DLedgerGroupRun", "restart", g, base / "broker.conf", 0, ",".join(IDS))
    assert r3["caughtUp"]
    reported = {lead: _log(w["leaderLog"]), a: _log(r2["logs"][a]), b: _log(r2["logs"][b])}
    return members, reported, r3, lead, a, b, snap


def test_each_members_log_is_read_as_the_member_holds_it(group):
    members, reported, *_ = group
    for m in members:
        assert {i: (e.term, e.pos, e.size) for i, e in m.entries.items()} == \
            {i: x[:3] for i, x in reported[m.name].items()}, m.name
        assert (m.end, m.rec.ledger_end_term) == (max(reported[m.name]), reported[m.name][m.end][0])


def test_candidates_divergence_and_entries_on_one_member_only(group):
    members, reported, r3, lead, a, b, _ = group
    c = dr.compare_group(members)
    # A and B hold the new term's entries: either can win, L cannot (neither votes for it)
    assert sorted(c.candidates) == sorted([a, b]) and r3["leader"] in c.candidates
    for (x, y), i in c.divergence.items():
        differ = [k for k in sorted(set(reported[x]) | set(reported[y])) if reported[x].get(k) != reported[y].get(k)]
        assert i == (differ[0] if differ else None), (x, y)
    for m in members:
        alone = sorted(k for k, e in reported[m.name].items()
                       if all(reported[o].get(k) != e for o in IDS if o != m.name))
        assert c.only_on[m.name] == alone, m.name


def test_the_winners_truncation_is_what_the_real_followers_lose(group):
    """The real winner's comparison: each follower's entries that step 3 replaced or removed are
    exactly the ones predicted dropped, the rest kept as they were, the leader's appended after."""
    members, reported, r3, lead, a, b, _ = group
    c = dr.compare_group(members)
    after = {n: _log(r3["logs"][n]) for n in IDS}
    winner = r3["leader"]
    assert all(after[n] == after[winner] for n in IDS)
    for t in c.truncations[winner]:
        before = reported[t.follower]
        changed = sorted(k for k in before if after[t.follower].get(k) != before[k])
        assert t.dropped == changed, t.follower
        assert t.appended_from == min([k for k in after[t.follower] if before.get(k) != after[t.follower][k]]
                                      + [max(after[t.follower]) + 1])
    assert next(t for t in c.truncations[winner] if t.follower == lead).dropped == c.only_on[lead] != []


def test_the_replicas_job_prints_the_comparison(group, capsys):
    """``jobs.replicas --member``: the same comparison as JSON, exit 1 (the logs differ)."""
    from jobs import replicas as replicas_job

    members, *_, snap = group
    argv = [a for n in IDS for a in ("--member", f"{snap / n}={snap / n}.group.conf")]
    assert replicas_job.main(argv + ["--json"]) == 1
    import json
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(dr.compare_group(members).as_dict()))
    assert replicas_job.main(argv) == 1
    out = capsys.readouterr().out
    assert "can win an election (of 3)" in out and " entries (" in out
