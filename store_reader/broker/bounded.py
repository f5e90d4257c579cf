"""The commitlog as a bounded prediction reads it: what the broker's own restart reads, and no more.

The broker's recovery (R§4) reads the first record of each file its start file search looks at
(from the newest file back), then walks the files from the start file on; the 4.9 reput reads on
from the consume queues' max, and a controller-mode broker from its confirm offset. ``Segments``
holds one ``SegmentSummary`` per commitlog file: a file is walked (``walk``) only once the
prediction asks for it (``walk_from``), a first record read only where the search looks at it
(``heads``); the others stay as listed (``SegmentSummary.walked`` False). So a prediction's reads
are flat in the size of the store. What it does not see (damage in a file before the first one
walked) is in ``docs/spec/recovery.md`` §17; ``jobs.audit`` walks every file.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Callable

from store_reader.formats import recordformat as rf
from store_reader.broker import prediction, versions
from store_reader.formats.commitlog import SegmentSummary, head_summary, summarize_segment
from store_reader.formats.mappedfile import MappedFile
from store_reader.store import Store

# Walks the given files (one summary each, in their order), e.g. keeping their records for the run.
Walker = Callable[[list[MappedFile]], list[SegmentSummary]]


class Segments:
    """The store's commitlog files, walked on demand. ``summaries`` is one list for the run,
    updated in place: a file's entry becomes its walk's summary once walked."""

    def __init__(self, files: Sequence[MappedFile], opts: rf.ScanOptions, walk: Walker) -> None:
        self.files = list(files)
        self.opts = opts
        self._walk = walk
        self.summaries = [SegmentSummary(f.name, f.path, f.start, f.size, walked=False) for f in self.files]
        self.heads = _Heads(self)
        self._head_read: set[int] = set()

    def head(self, index: int) -> SegmentSummary:
        """The file's summary with its first record read (a walked file's as it is)."""
        s = self.summaries[index]
        if not s.walked and index not in self._head_read:
            f = self.files[index]
            s = self.summaries[index] = head_summary(f.path, self.opts, f.start, f.size)
            self._head_read.add(index)
        return s

    def walk_from(self, index: int) -> None:
        """Walk every file from ``index`` on that is not walked yet."""
        todo = [i for i in range(max(index, 0), len(self.files)) if not self.summaries[i].walked]
        if todo:
            for i, s in zip(todo, self._walk([self.files[i] for i in todo])):
                self.summaries[i] = s

    def index_of(self, offset: int) -> int:
        """The index of the file holding commitlog ``offset`` (the last file when past its end)."""
        return next((i for i, f in enumerate(self.files) if f.start + f.size > offset), len(self.files) - 1)


class _Heads(Sequence):
    """The summaries as the start file search reads them: each file's first record read on access."""

    def __init__(self, segments: Segments) -> None:
        self._segments = segments

    def __len__(self) -> int:
        return len(self._segments.files)

    def __getitem__(self, index: int) -> SegmentSummary:     # the search takes one file at a time
        return self._segments.head(index)


def predict(store: Store, broker_version: str | None = None, walk: Walker | None = None, **kwargs
            ) -> tuple[prediction.Prediction, Segments]:
    """``prediction.predict`` from the files the broker's restart reads, and those files' summaries.
    ``walk``: how a file is walked (default: summarised here, the replay reading it again);
    ``kwargs``: ``prediction.predict``'s (the replay's ``records`` and ``puts`` where ``walk`` kept them)."""
    version = versions.resolve_version(broker_version or store.broker_version())
    opts = store.scan_options(broker_5x=versions.is_5x(version), index_tags=versions.index_tag_keys(version))
    segments = Segments(store.commitlog_files, opts,
                        walk or (lambda files: [summarize_segment(f.path, opts) for f in files]))
    return prediction.predict(store, version, segments=segments, **kwargs), segments
