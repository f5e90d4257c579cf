"""The members of one DLedger group compared (R§16.6): each member's log as its own recovery leaves
it (``dledger.recover``), who could win an election, where the logs diverge, what a new leader's
``DLedgerEntryPusher`` truncates on each follower, and the entries one member holds alone.

DLedger 0.3.1.2, 0.3.2 and 0.3.3.4 (the versions 4.9.7-5.5.1 pin) share these rules:
- a vote is granted to a candidate whose (ledgerEndTerm, ledgerEndIndex) is not below the voter's
  (``DLedgerLeaderElector#handleVote``); a majority of the group elects;
- the new leader's ``EntryDispatcher#doCompare`` compares from its ledgerEndIndex down: an index the
  follower holds with an equal entry (``DLedgerEntry#equals``: magic, size, index, term, channel,
  pos and body) ends the comparison there; a follower whose log does not meet the leader's, or that
  starts after the compared index, is truncated at the leader's ledgerBeginIndex;
- ``DLedgerMmapFileStore#truncate`` keeps the follower's entry at that index when it equals the
  leader's (else drops it too) and every later entry is dropped; the leader then appends its own.
Spark-free: the members' headers are read once, their bodies hashed.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from store_reader.formats import dledger
from store_reader.broker import dledger as broker_dledger
from store_reader.formats import recordformat as rf


@dataclass(frozen=True)
class Entry:
    """What ``DLedgerEntry#equals`` compares (the body as a digest)."""

    magic: int
    size: int
    index: int
    term: int
    channel: int
    pos: int
    body: bytes


@dataclass
class Member:
    """One member's log after its own recovery."""

    name: str
    rec: broker_dledger.DLedgerRecovery
    entries: dict[int, Entry]

    @property
    def begin(self) -> int:
        return self.rec.ledger_begin_index

    @property
    def end(self) -> int:
        return self.rec.ledger_end_index

    @property
    def last(self) -> tuple[int, int]:
        """(ledgerEndTerm, ledgerEndIndex): what a vote compares."""
        return self.rec.ledger_end_term, self.rec.ledger_end_index


def read_member(name: str, store) -> Member:
    """The entries ``store``'s DLedger recovery keeps (``open_store(read_dledger=True)``)."""
    rec = broker_dledger.recover(store)
    out: dict[int, Entry] = {}
    for _, p, h, _, buf in dledger.entries_with_units(store):
        magic, size, index, term, pos, channel = h[:6]
        if rec.ledger_begin_index <= index <= rec.ledger_end_index and pos + size <= rec.last_entry_end \
                and index not in out:
            body = hashlib.blake2b(buf[p + rf.DLEDGER_BODY_OFFSET:p + size], digest_size=16).digest()
            out[index] = Entry(magic, size, index, term, channel, pos, body)
    return Member(name, rec, out)


def can_win(candidate: Member, members: list[Member], group_size: int) -> bool:
    """A majority of the group would vote for ``candidate``: its (term, index) is not below theirs."""
    return sum(m.last <= candidate.last for m in members) * 2 > group_size


@dataclass
class Truncation:
    """What a leader's comparison does to one follower."""

    follower: str
    truncate_index: int | None
    """``doTruncate``'s index, or None: the follower's log ends on an entry equal to the leader's."""
    dropped: list[int] = field(default_factory=list)
    """The follower's entries removed (indexes), in order."""
    appended_from: int = 0
    """The first index the leader then pushes to the follower."""


def truncation(leader: Member, follower: Member) -> Truncation:
    """``EntryDispatcher#doCompare`` then ``DLedgerMmapFileStore#truncate`` (module docstring)."""
    out = Truncation(follower.name, None, [], leader.end + 1)
    if leader.end == -1:               # nothing to compare: the dispatcher waits
        return out
    ci, t = leader.end, None
    while t is None:
        mine = follower.entries.get(ci)
        if mine is not None and mine == leader.entries.get(ci):
            if ci == follower.end:
                out.appended_from = ci + 1
                return out
            t = ci
        elif follower.end < leader.begin or follower.begin > leader.end or ci < follower.begin:
            t = leader.begin
        elif ci > follower.end:
            ci = follower.end
        else:
            ci -= 1
        if t is None and ci < leader.begin:
            t = leader.begin
    kept = follower.entries.get(t) is not None and follower.entries.get(t) == leader.entries.get(t)
    out.truncate_index, out.appended_from = t, t + 1
    out.dropped = sorted(i for i in follower.entries if i > t or (i == t and not kept))
    return out


def first_divergence(a: Member, b: Member) -> int | None:
    """The first index both hold with entries that differ (term, position or body), or where one
    log ends and the other goes on; None when the logs are equal."""
    for i in range(max(min(a.begin, b.begin), 0), max(a.end, b.end) + 1):
        if a.entries.get(i) != b.entries.get(i):
            return i
    return None


@dataclass
class GroupComparison:
    members: list[Member]
    group_size: int
    candidates: list[str]
    """Members that can win an election now."""
    truncations: dict[str, list[Truncation]]
    """Per candidate: what its comparison does to every other member."""
    divergence: dict[tuple[str, str], int | None]
    only_on: dict[str, list[int]]
    """Per member: indexes of entries no other member holds equal."""

    def as_dict(self) -> dict:
        return {
            "group_size": self.group_size,
            "members": {m.name: {"begin": m.begin, "end": m.end, "end_term": m.rec.ledger_end_term,
                                 "committed_index": m.rec.committed_index, "curr_term": m.rec.curr_term}
                        for m in self.members},
            "candidates": self.candidates,
            "truncations": {c: [t.__dict__ for t in ts] for c, ts in self.truncations.items()},
            "divergence": {f"{a}/{b}": i for (a, b), i in self.divergence.items()},
            "only_on": self.only_on,
        }


def compare_group(members: list[Member], group_size: int | None = None) -> GroupComparison:
    """Every question of the module docstring for ``members`` (``group_size``: the peers in
    dLegerPeers, default the members given)."""
    n = group_size or len(members)
    candidates = [c for c in members if can_win(c, members, n)]
    only = {m.name: sorted(i for i, e in m.entries.items()
                           if not any(o.entries.get(i) == e for o in members if o is not m))
            for m in members}
    return GroupComparison(
        members, n, [c.name for c in candidates],
        {c.name: [truncation(c, f) for f in members if f is not c] for c in candidates},
        {(a.name, b.name): first_divergence(a, b) for i, a in enumerate(members) for b in members[i + 1:]},
        only)
