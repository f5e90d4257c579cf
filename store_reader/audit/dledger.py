"""A DLedger store's own checks (R§16.1, F§16): its data files against its index units, and the
entries past the committed index its checkpoint records."""
from __future__ import annotations

import numpy as np

from store_reader.formats import dledger
from store_reader.broker import dledger as broker_dledger
from store_reader.formats import recordformat as rf
from store_reader.audit.report import Findings, report_runs


def dledger_findings(store, rec: broker_dledger.DLedgerRecovery, found: Findings) -> None:
    """Of the entries DLedger's recovery keeps (``rec``): ``dledger.unit_disagrees``, entries whose
    index unit (absent, or its magic, pos or size) disagrees with the entry's header, which
    DLedger's recovery rewrites only from the first such entry of its walk on; ``dledger.beyond_committed``: entries past the checkpoint's
    committedIndex, which a new leader of a larger group may truncate."""
    unit_size = rf.DLEDGER_INDEX_UNIT.size
    index_dir = store.dledger / "index"
    bad: list[tuple[int, tuple, tuple | None]] = []
    beyond: list[tuple[int, str, int]] = []
    committed = -1                      # no checkpoint, or no number in it (R§16.1 step 7)
    try:
        committed = int(rec.checkpoint_committed_index)
    except (TypeError, ValueError):
        pass
    for f, p, h, unit, _ in dledger.entries_with_units(store):
        magic, size, entry_index, _, pos = h[:5]
        if not (rec.ledger_begin_index <= entry_index <= rec.ledger_end_index and pos + size <= rec.last_entry_end):
            continue        # not in the log DLedger's recovery keeps (bytes past its end)
        if unit is None or (unit[0], unit[1], unit[2]) != (magic, pos, size):
            bad.append((entry_index, h, unit))
        if entry_index > committed:
            beyond.append((entry_index, str(f.path), p))
    found.files_checked += len(store.commitlog_files)
    by_index = {i: (h, u) for i, h, u in bad}

    def describe(first: int, last: int):
        h, u = by_index[first]
        unit = "no index unit" if u is None else f"the unit says magic {u[0]}, pos {u[1]}, size {u[2]}"
        return (first * unit_size, f"entries {first}..{last}: the index units disagree with the entry "
                f"headers (entry {first}: magic {h[0]}, pos {h[4]}, size {h[1]}; {unit})",
                h[4] + rf.DLEDGER_BODY_OFFSET, {})
    if bad:
        report_runs(found, "dledger.unit_disagrees", str(index_dir), np.array(sorted(by_index)), describe)
    if beyond:
        first, path, p = min(beyond)
        last = max(i for i, _, _ in beyond)
        found.add("dledger.beyond_committed", path, p,
                  f"{len(beyond)} entries ({first}..{last}) past the checkpoint's committedIndex "
                  f"{committed}: a one-member group commits them after its election, a new leader of "
                  "a larger group may truncate them", None, len(beyond))
