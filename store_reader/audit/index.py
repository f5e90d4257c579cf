"""Index file checks (R§8, F§7), both engines'.

``header_problems`` and ``entry_findings``: the Spark audit's, from what its tasks saw of each index
file (entries cut by the commitlog file they point into, per lens: on disk / recovered).
``verify_index``: ``jobs.dump --verify``'s, reading each index file whole on one machine (header,
counts, slot chains, dangling entries, coverage of the dispatched records).

One rule set for the header (``header_checks``) serves both; the audit sees the entries in parts
(the lowest and highest phy offset, whether a timeDiff is negative, how many slots point too far),
dump walks the whole file and also checks the hash-slot chains entry by entry.

The pair checks the audit runs over every entry and put (``held``, ``repeated_pairs``) run in the
native module's kernels (``_native.index_pairs_held``, ``index_pairs_repeated``), their NumPy
twins here where the twins are selected (``store_reader.kernels``).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from store_reader.audit.report import Findings, count_of, norm_path, range_text, report_runs, span_text
from store_reader.broker.dispatch import indexable
from store_reader.exceptions import CannotRead, FileSizeError, StoreReaderError
from store_reader.io.fsutil import list_dir
from store_reader.formats.indexfile import (HEADER_POSITION, INDEX_ENTRY_SIZE, IndexFile, IndexHeader, entry_position,
                                            index_file_size, slot_position)
from store_reader.kernels import native_kernel
from store_reader.ranges import ascending
from store_reader.io.storefs import PathRef, location

if TYPE_CHECKING:            # dump's checks take its view; the view runs the audit's stage 2 (compare -> index)
    from store_reader.audit.view import StoreView


# -- the audit ----------------------------------------------------------------------------------------

def header_checks(h: IndexHeader, index_num: int, phy_range: tuple[int, int] | None,
                  hash_slot_num: int | None = None) -> list[tuple[int, str]]:
    """The one rule set for an index file's header (F§7.4; IndexService trusts it): (byte position
    in the file, what is wrong). ``phy_range``: the lowest and highest phy offset of its entries in
    use (None: no entry in use); ``hash_slot_num``: maxHashSlotNum, to check hashSlotCount (the
    audit's tasks do not pass it)."""
    out = []
    if not 0 <= h.index_count <= index_num:
        out.append((HEADER_POSITION["index_count"], f"indexCount {h.index_count} outside 0..maxIndexNum ({index_num})"))
    if hash_slot_num is not None and not 0 <= h.hash_slot_count <= min(hash_slot_num, max(h.index_count, 0)):
        out.append((HEADER_POSITION["hash_slot_count"], f"hashSlotCount {h.hash_slot_count} outside 0..min(maxHashSlotNum, indexCount)"))
    if phy_range is not None:
        # each put sets endTimestamp and endPhyOffset, the first also the begin ones: entries are
        # put in phy order, so begin/end are its entries' lowest and highest phy offsets
        if h.end_timestamp < h.begin_timestamp:
            out.append((HEADER_POSITION["end_timestamp"], f"endTimestamp {h.end_timestamp} is before beginTimestamp {h.begin_timestamp}"))
        lo, hi = phy_range
        if h.begin_phy_offset != lo:
            out.append((HEADER_POSITION["begin_phy_offset"], f"beginPhyOffset {h.begin_phy_offset} but its entries start at phy {lo}"))
        if h.end_phy_offset != hi:
            out.append((HEADER_POSITION["end_phy_offset"], f"endPhyOffset {h.end_phy_offset} but its entries end at phy {hi}"))
    return out


def header_problems(h: IndexHeader, index_num: int, parts: Sequence[tuple]) -> list[str]:
    """The audit's ``bad_header`` details of one index file: ``header_checks``, then the entries'
    negative timeDiffs and the hash slots pointing outside ``[0, indexCount]`` (dump --verify
    reports those per entry and slot, ``index.slot_chain``). ``parts``: what its stage-1 tasks saw
    (``(source, lowest phy, highest phy, negative timeDiff, slots over)``)."""
    lows = [p[1] for p in parts if p[1] is not None]
    phy_range = (min(lows), max(p[2] for p in parts if p[2] is not None)) if lows else None
    out = [detail for _, detail in header_checks(h, index_num, phy_range)]
    if any(p[3] for p in parts):
        out.append("negative timeDiff in entries (queries stop there)")
    over = sum(p[4] for p in parts)
    if over:
        out.append(f"{over} hash slots point outside [0, indexCount]")
    return out


def index_pairs(key_hash: Sequence[np.ndarray], phy: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Each (key hash, phy offset) pair of index entries or puts as one int64, equal exactly when
    both parts are and ordered by phy offset, then key hash (as unsigned 32 bits): entries and puts
    come in commitlog order, so a stable sort of them is nearly linear. Phy offsets are taken
    relative to the lowest of all the arrays', or as their rank where they span 2 GiB or more."""
    phy = [p.astype(np.int64) for p in phy]
    filled = [p for p in phy if len(p)]
    if filled and max(int(p.max()) for p in filled) - min(int(p.min()) for p in filled) >= 1 << 31:
        seen = np.unique(np.concatenate(filled))
        codes = [np.searchsorted(seen, p) for p in phy]
    else:
        lo = min((int(p.min()) for p in filled), default=0)
        codes = [p - lo for p in phy]
    return [(c << 32) | (k.astype(np.int64) & 0xFFFFFFFF) for c, k in zip(codes, key_hash)]


def entry_findings(kh: np.ndarray, phy: np.ndarray, entry_number: np.ndarray, file_order: np.ndarray,
                    names: dict[int, str | None], lens: str, lo: int, end: int) -> list[dict]:
    """Dangling entries (below ``lo``, at or past ``end``) and repeated (key hash, phy offset)
    pairs (all but the first in put order), per index file of the lens."""
    if not len(phy):
        return []
    put = (file_order.astype(np.int64) << 32) + entry_number      # entry numbers stay below 2^31
    in_order = bool((put[1:] > put[:-1]).all())
    masks = {"dangling_below_min": phy < lo, "dangling_beyond_end": phy >= end}
    if in_order:
        masks["duplicate_entry"] = repeated_pairs(kh, phy)
    else:
        order = np.lexsort((entry_number, file_order))      # put order
        masks["duplicate_entry"] = np.zeros(len(phy), bool)
        masks["duplicate_entry"][order[repeated_pairs(kh[order], phy[order])]] = True
    out = []
    for kind, m in masks.items():
        for fo in np.unique(file_order[m]):
            sel = m & (file_order == fo)
            out.append({"kind": kind, "index": lens, "file": names[int(fo)], "topic": None,
                        "phy_from": int(phy[sel].min()), "phy_to": int(phy[sel].max()) + 1,
                        "count": int(sel.sum()), "detail": None, "file_order": int(fo)})
    return out


def held(lens_kh: np.ndarray, lens_phy: np.ndarray, key_hash: np.ndarray, phy: np.ndarray) -> np.ndarray:
    """Whether each (key hash, phy offset) pair is among a lens's entries (a put's key hash is
    never negative; an entry with a negative one matches nothing)."""
    if not len(lens_kh) or not len(key_hash):
        return np.zeros(len(key_hash), bool)
    kernel = native_kernel("index_pairs_held")
    if kernel is None:
        have, want = index_pairs([lens_kh, key_hash], [lens_phy, phy])
        have = np.sort(have, kind="stable")
        at = np.minimum(np.searchsorted(have, want), len(have) - 1)
        found = have[at] == want
    else:
        hk, hp, _ = _by_phy(lens_kh, lens_phy)
        wk, wp, order = _by_phy(key_hash, phy)
        found = _in_order(np.frombuffer(kernel(hk, hp, wk, wp), np.bool_), order)
    return found & (key_hash >= 0)


def repeated_pairs(key_hash: np.ndarray, phy: np.ndarray) -> np.ndarray:
    """Whether each (key hash, phy offset) pair, in put order, equals an earlier one."""
    kernel = native_kernel("index_pairs_repeated")
    if kernel is None:
        pair = index_pairs([key_hash], [phy])[0]
        by_pair = np.argsort(pair, kind="stable")        # equal pairs in put order
        pair = pair[by_pair]
        out = np.zeros(len(phy), bool)
        out[by_pair[1:][pair[1:] == pair[:-1]]] = True
        return out
    k, p, order = _by_phy(key_hash, phy)
    return _in_order(np.frombuffer(kernel(k, p), np.bool_), order)


def _by_phy(key_hash: np.ndarray, phy: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The pairs as int64 arrays in phy order, their order kept within a phy offset (the native
    kernels' input), and the permutation that took them there (None: they were in it)."""
    key_hash, phy = key_hash.astype(np.int64, copy=False), phy.astype(np.int64, copy=False)
    if ascending(phy):
        return key_hash, phy, None
    order = np.argsort(phy, kind="stable")
    return key_hash[order], phy[order], order


def _in_order(values: np.ndarray, order: np.ndarray | None) -> np.ndarray:
    """``values`` given in the ``_by_phy`` permutation ``order``, back in the pairs' own order."""
    if order is None:
        return values
    out = np.empty_like(values)
    out[order] = values
    return out


# -- dump --verify ------------------------------------------------------------------------------------

def verify_index_file(view: StoreView, found: Findings, f: IndexFile) -> None:
    """Header, counts, slot chains and dangling entries of one index file (module docstring)."""
    h, path = f.header, f.path
    n_used = min(h.entries_in_use, f.index_num - 1)
    used = f.entries[1:1 + n_used]
    number = np.arange(1, n_used + 1, dtype=np.int64)          # entry numbers in use
    phy = used["phy_offset"].astype(np.int64)

    def entry_runs(kind: str, mask: np.ndarray, what: Callable[[int, int], str],
                   with_phy: bool = False) -> None:
        """Runs of entries (by number) selected by ``mask`` over the entries in use."""
        report_runs(found, kind, path, number[mask], lambda a, b: (
            entry_position(f.hash_slot_num, a), f"{span_text('entry', a, b, 'entries')} {what(a, b)}",
            int(phy[a - 1]) if with_phy else None, {"entries": [a, b]}))

    def slot_runs(slots: np.ndarray, what: Callable[[int, int], str]) -> None:
        report_runs(found, "index.slot_chain", path, slots, lambda a, b: (
            slot_position(a), f"{span_text('slot', a, b)} {what(a, b)}", None,
            {"slots": [a, b]}))

    # 1. header (one rule set with the audit's)
    for position, detail in header_checks(h, f.index_num, (int(phy.min()), int(phy.max())) if n_used else None,
                                          f.hash_slot_num):
        found.add("index.bad_header", path, position, detail)
    # 2. counts: used slots and the entries past indexCount
    heads = f.slots[:].astype(np.int64)      # one read (a remote file's slots are read on demand)
    in_use = int(np.count_nonzero(heads))
    if in_use != h.hash_slot_count:
        found.add("index.entry_count", path, 32, f"{count_of(in_use, 'slot')} in use but hashSlotCount "
                  f"is {h.hash_slot_count}")
    report_runs(found, "index.entry_count", path, _nonzero_entries(f, 1 + n_used), lambda a, b: (
        entry_position(f.hash_slot_num, a), f"{span_text('entry', a, b, 'entries')} holding data past indexCount "
        f"{h.index_count}: queries never reach them", None, {"entries": [a, b]}))
    # 3. slot chains: every entry in use hangs exactly once in the chain of its own slot
    slot_of = used["key_hash"].astype(np.int64) % f.hash_slot_num
    head_slots = np.flatnonzero(heads)
    beyond = head_slots[(heads[head_slots] < 0) | (heads[head_slots] > n_used)]
    slot_runs(beyond, lambda a, b: f"pointing at entry {int(heads[a])}, beyond indexCount "
                                   f"{h.index_count}")
    good_heads = np.setdiff1d(head_slots, beyond)
    wrong_head = good_heads[slot_of[heads[good_heads] - 1] != good_heads]
    slot_runs(wrong_head, lambda a, b: f"holding entry {int(heads[a])}, whose keyHash belongs to slot "
                                       f"{int(slot_of[heads[a] - 1])}")
    prev = used["prev_index"].astype(np.int64)
    linked = prev != 0
    bad_prev = linked & ((prev < 0) | (prev >= number))
    ok_prev = linked & ~bad_prev
    bad_prev[ok_prev] = slot_of[prev[ok_prev] - 1] != slot_of[ok_prev]
    entry_runs("index.slot_chain", bad_prev,
               lambda a, b: f"with prevIndex {int(prev[a - 1])}, not an earlier entry of the same "
                            "slot: the chain breaks")
    indegree = np.zeros(n_used + 1, dtype=np.int64)
    np.add.at(indegree, heads[good_heads], 1)
    np.add.at(indegree, prev[linked & ~bad_prev], 1)
    entry_runs("index.slot_chain", indegree[1:] == 0,
               lambda a, b: "unreachable from any slot: queries never find them")
    entry_runs("index.slot_chain", indegree[1:] > 1, lambda a, b: "reached by more than one chain")
    entry_runs("index.slot_chain", used["time_diff"] < 0,
               lambda a, b: "with a negative timeDiff: a query walking the chain stops there")
    # 4. dangling entries: outside the recovered commitlog, or where no record starts
    for kind, mask, bound in (
            ("index.beyond_max", phy >= view.max_phy,
             f"at or beyond the commitlog max phy offset {view.max_phy}"),
            ("index.below_min", phy < view.min_phy,
             f"below the commitlog min phy offset {view.min_phy}")):
        entry_runs(kind, mask, lambda a, b, bound=bound: (
            f"(phy {range_text(int(phy[a - 1]), int(phy[b - 1]))}) pointing {bound}: "
            "queryMessage drops them"), with_phy=True)
    inside = (phy >= view.min_phy) & (phy < view.max_phy)
    entry_runs("index.no_record", inside & (view.records.find(phy) < 0),
               lambda a, b: f"pointing at phy {int(phy[a - 1])}, where no record starts", with_phy=True)


def _nonzero_entries(f: IndexFile, start: int, chunk: int = 1 << 20) -> np.ndarray:
    """Numbers of the entries from ``start`` on that hold a non-zero byte, read in chunks: the
    unused part of an index file is most of its 420 MB."""
    found = [np.zeros(0, np.int64)]
    for lo in range(start, len(f.entries), chunk):
        block = f.entries[lo:lo + chunk].view(np.uint8).reshape(-1, INDEX_ENTRY_SIZE)
        found.append(lo + np.flatnonzero(block.any(axis=1)))
    return np.concatenate(found)


def _index_files(view: StoreView, found: Findings) -> list[IndexFile]:
    cfg = view.config
    out = []
    for e in list_dir(view.store.index_dir, "index"):
        if e.is_dir():
            found.add("layout.load_problem", e.path, None, "directory inside the index directory")
            continue
        try:
            out.append(open_index(e.path, cfg.maxHashSlotNum, cfg.maxIndexNum, cfg.settings_hint))
        except StoreReaderError as exc:
            found.unreadable.append(exc)
    return out


def open_index(path: PathRef, hash_slot_num: int, index_num: int,
               settings_hint: str = "pass the broker's broker.conf") -> IndexFile:
    """An index file, or :class:`CannotRead` naming where its bytes stop fitting the layout
    (``settings_hint``: ``BrokerConfig.settings_hint``)."""
    try:
        return IndexFile(path, hash_slot_num, index_num)
    except FileSizeError:
        size = location(path).size()
        expected = index_file_size(hash_slot_num, index_num)
        raise CannotRead(f"index file is {size} bytes but maxHashSlotNum {hash_slot_num} / maxIndexNum "
                         f"{index_num} make {expected}: truncated, or written with other settings "
                         f"({settings_hint})", path, min(size, expected)) from None


def verify_index(view: StoreView, found: Findings, only: Path | None = None) -> None:
    """Every index file (``only``: one of them), then the index's coverage of dispatched records."""
    files = _index_files(view, found)
    found.files_checked += len(files) if only is None else 1
    for f in files:
        if only is None or norm_path(f.path) == norm_path(only):
            verify_index_file(view, found, f)
    if not view.config.messageIndexEnable:
        return
    r = view.records
    keyed = (r.valid_prefix & r.keyed & indexable(r.tran)
             & (r.phy >= view.min_phy) & (r.phy < view.max_phy))
    if not files:
        n = int(np.count_nonzero(keyed))
        if n and only is None:
            found.add("index.all_missing", view.store.index_dir, None,
                      f"no index file, but the commitlog holds {n} records with keys: queries by key "
                      "find nothing until a recovery re-dispatches them (R§8.2)")
        return
    indexed_until = max(f.header.end_phy_offset for f in files)
    late = np.flatnonzero(keyed & (r.phy > indexed_until) & view.dispatched(r.phy, r.stored_phy, r.size))
    if late.size:
        # where the next entry would go: the last file, or a new one when it is full
        last = files[-1]
        full = last.header.loaded_index_count >= last.index_num
        found.add("index.missing_entries", view.store.index_dir if full else last.path,
                  None if full else entry_position(last.hash_slot_num, last.header.loaded_index_count),
                  f"{count_of(int(late.size), 'record')} with keys (phy "
                  f"{range_text(int(r.phy[late[0]]), int(r.phy[late[-1]]))}) were dispatched to the "
                  f"consume queues but the index ends at phy {indexed_until}: queries by key miss "
                  "them; the normal path does not rebuild them (R§8.2)",
                  int(r.phy[late[0]]), int(late.size))


