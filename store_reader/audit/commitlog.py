"""Commitlog checks (R§3-§5): load problems, each segment's first bad record, valid data ending
without an end-of-file marker before more segments, gaps in the file sequence; and the process
state the broker reacts to (``abort``, ``lock``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

from store_reader.formats import recordformat as rf
from store_reader.audit.report import Findings, count_of
from store_reader.audit.view import StoreView
from store_reader.formats.checkpoint import lock_status
from store_reader.formats.commitlog import SegmentSummary
from store_reader.exceptions import CannotRead
from store_reader.store import Store


def not_a_segment(s: SegmentSummary) -> bool:
    """Random bytes: no record header at byte 0, nothing intact anywhere, not an empty segment."""
    return (s.records == 0 and s.records_after_cut == 0 and s.end_reason in ("torn_tail", "corrupt")
            and s.first_magic not in (rf.MAGIC_V1, rf.MAGIC_V2, rf.BLANK_MAGIC))


class BrokerCut(Protocol):
    """Where the broker's recovery starts and ends the commitlog (``StoreView`` computes it when
    first asked; the audit has it from its prediction)."""

    @property
    def start_index(self) -> int: ...          # the segment (index into the summaries) it starts from

    @property
    def max_phy(self) -> int: ...              # the recovered end


@dataclass(frozen=True)
class PredictedCut:
    start_index: int
    max_phy: int

    @classmethod
    def of(cls, summaries: Sequence[SegmentSummary], start_file: str | None, max_phy: int) -> "PredictedCut":
        names = [s.segment for s in summaries]
        return cls(names.index(start_file) if start_file in names else 0, max_phy)


def verify_commitlog(view: StoreView, found: Findings) -> None:
    """Commitlog anomalies (module docstring): load problems, file gaps, ``segment_findings``."""
    verify_layout(view.store, view.broker_5x, found)
    verify_commitlog_sequence(view.store, found)
    segment_findings(view.summaries, view, view.opts.check_crc, found)


def segment_findings(summaries: Sequence[SegmentSummary], cut: BrokerCut, check_crc: bool,
                     found: Findings) -> None:
    """From the segments' scan summaries: per segment its first bad record, valid data ending
    without an end-of-file marker before more segments, bytes after a marker, CRC failures the
    broker does not check (``check_crc``: checkCRCOnRecover); a file that is no segment at all is
    unreadable."""
    found.files_checked += len(summaries)
    for i, s in enumerate(summaries):
        later = summaries[i + 1:]
        if not_a_segment(s):
            found.unreadable.append(CannotRead(
                f"not a commitlog segment: no record header at byte 0 (magic 0x"
                f"{(s.first_magic or 0) & 0xFFFFFFFF:08x}) and no intact record anywhere", s.path, 0))
            continue
        if s.end_reason in ("torn_tail", "corrupt"):
            found.add("commitlog.bad_record", s.path, s.valid_bytes,
                      _bad_record_message(summaries, cut, i, s, later), s.end_phy_offset, check=s.end_check,
                      end_reason=s.end_reason, declared_size=s.end_declared_size,
                      resync_position=s.resync_position, records_after_cut=s.records_after_cut,
                      broker_cut=s.end_phy_offset == cut.max_phy)
        elif s.end_reason in ("zero_padding", "file_end") and later:
            found.add("commitlog.no_eof_marker", s.path, s.valid_bytes,
                      f"valid data ends without an end-of-file marker but {len(later)} more "
                      f"{'segment follows' if len(later) == 1 else 'segments follow'}: "
                      f"{_broker_cut(summaries, cut, i, s, later)}", s.end_phy_offset,
                      end_reason=s.end_reason, later_segments=[x.segment for x in later],
                      broker_cut=s.end_phy_offset == cut.max_phy)
        if s.nonzero_after_marker:
            found.note("note.after_marker", s.path, s.valid_bytes + rf.END_FILE_MIN_BLANK_LENGTH,
                       "bytes after the end-of-file marker are not zero (the broker never reads them)")
        if s.crc_failures and not check_crc:
            found.note("note.crc_unchecked", s.path, None,
                       f"{s.crc_failures} records fail their CRC, which the broker does not check "
                       "(checkCRCOnRecover=false)")


def verify_layout(store: Store, broker_5x: bool, found: Findings) -> None:
    """What makes the broker refuse to load the commitlog (``layout.load_problem``)."""
    for problem in store.load_problems_for(broker_5x):
        found.add("layout.load_problem", problem.path or store.root, problem.position, problem.reason)


def verify_commitlog_sequence(store: Store, found: Findings) -> None:
    """Consecutive commitlog files whose start offsets are not one file size apart (a missing file
    or an overlap): the broker only logs it, so it is a note. ``jobs.audit`` reports it too."""
    for note in store.notes:
        if "gap or overlap" in note:
            path, text = note.split(": ", 1)
            found.note("note.commitlog_gap", path, None, text)


def _bad_record_message(summaries: Sequence[SegmentSummary], cut: BrokerCut, i: int, s: SegmentSummary,
                        later: Sequence[SegmentSummary]) -> str:
    msg = f"first record failing a check: {s.end_check} (declared TOTALSIZE {s.end_declared_size}); "
    if s.end_reason == "torn_tail":
        msg += "nothing intact follows it (torn tail); "
    else:
        msg += (f"{s.records_after_cut} intact records follow from position {s.resync_position} "
                f"(phy {s.file_start + (s.resync_position or 0)}) and are lost; ")
    return msg + _broker_cut(summaries, cut, i, s, later)


def _broker_cut(summaries: Sequence[SegmentSummary], cut: BrokerCut, i: int, s: SegmentSummary,
                later: Sequence[SegmentSummary]) -> str:
    """What the broker's recovery does at the end of segment ``i``'s valid data."""
    if i < cut.start_index:
        return (f"recovery starts at {summaries[cut.start_index].segment} and never reads it: "
                "the records here stay readable through their consume queue entries")
    if s.end_phy_offset != cut.max_phy:
        return f"beyond the broker's cut at phy {cut.max_phy}: this segment is deleted"
    held = sum(x.records + x.records_after_cut for x in later)
    deleted = (f" and deletes {count_of(len(later), 'later segment')} holding {count_of(held, 'record')}"
               if later else "")
    return f"the broker truncates the commitlog here (max phy offset {cut.max_phy}){deleted}"


def verify_process_state(view: StoreView, found: Findings) -> None:
    """``abort`` and ``lock``: states the broker reacts to, not damage (notes)."""
    root = view.store.root
    if view.store.abort_exists:
        found.note("note.abort", root / "abort", None, "the last shutdown was not clean: the next "
                   "start runs the abnormal recovery (R§4.1)")
    lock = lock_status(root)
    if lock.locked:
        found.note("note.lock", lock.path, None, "a running broker holds the lock"
                   + (f" (pid {lock.pid})" if lock.pid else "") + ": the files change while read")

