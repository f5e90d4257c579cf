"""What a verification collects: anomalies and notes located in the store's files (file, byte
position, phy offset), grouped into runs of consecutive entries, and the unreadable files."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from store_reader.audit.kinds import INFO_KINDS, finding_kind
from store_reader.exceptions import StoreReaderError
from store_reader.ranges import consecutive_runs
from store_reader.io.storefs import PathRef, StoreLocation

MAX_RUNS = 10                     # runs of one anomaly kind reported per file; the rest summed up


@dataclass(frozen=True)
class Anomaly:
    """One finding located in the files: ``kind`` is jobs.dump's name for it, ``finding`` its kind
    in the one vocabulary (``store_reader.audit.kinds``)."""

    kind: str
    path: str
    position: int | None
    message: str
    phy_offset: int | None = None
    count: int = 1
    details: dict[str, Any] = field(default_factory=dict, compare=False)
    """Machine-readable facts behind the message (JSON output)."""

    @property
    def finding(self) -> str:
        return finding_kind(self.kind)

    @property
    def alerting(self) -> bool:
        """Whether it needs an operator: an ``info`` kind is normal broker behaviour, reported
        but not alerting (the audit and dump --verify exit 0 on it)."""
        return self.finding not in INFO_KINDS

    def where(self) -> str:
        return self.path + (f" @ byte {self.position}" if self.position is not None else "")

    def text(self) -> str:
        phy = f" (phy {self.phy_offset})" if self.phy_offset is not None else ""
        return f"{'ANOMALY' if self.alerting else 'INFO'} {self.kind} {self.where()}{phy}: {self.message}"

    def as_json(self) -> dict[str, Any]:
        return {"type": "anomaly", "kind": self.kind, "finding": self.finding, "file": self.path, "position": self.position,
                "phy_offset": self.phy_offset, "count": self.count, "message": self.message,
                **({"details": self.details} if self.details else {})}


@dataclass
class Findings:
    """Anomalies, notes and unreadable files collected by a verification."""

    anomalies: list[Anomaly] = field(default_factory=list)
    notes: list[Anomaly] = field(default_factory=list)
    unreadable: list[StoreReaderError] = field(default_factory=list)
    files_checked: int = 0

    def add(self, kind: str, path: str | os.PathLike[str], position: int | None, message: str,
            phy_offset: int | None = None, count: int = 1, **details: Any) -> None:
        self.anomalies.append(Anomaly(kind, str(path), position, message, phy_offset, count,
                                      details))

    def note(self, kind: str, path: str | os.PathLike[str], position: int | None, message: str) -> None:
        self.notes.append(Anomaly(kind, str(path), position, message))

    def rows(self) -> list[dict[str, Any]]:
        """The anomalies and notes as ``store_findings`` rows (``schemas.audit.STORE_FINDINGS``)."""
        return [{"kind": a.finding, "severity": severity if a.alerting else "info", "file": a.path,
                 "position": a.position, "phy_offset": a.phy_offset, "detail": a.message}
                for severity, items in (("anomaly", self.anomalies), ("note", self.notes)) for a in items]

    @property
    def alerting(self) -> list[Anomaly]:
        """The anomalies that need an operator (what makes dump --verify exit 1)."""
        return [a for a in self.anomalies if a.alerting]

    def only(self, path: str | os.PathLike[str]) -> "Findings":
        """The findings located in ``path`` (a single-file verification)."""
        key = norm_path(path)
        return Findings([a for a in self.anomalies if norm_path(a.path) == key],
                        [n for n in self.notes if norm_path(n.path) == key],
                        [e for e in self.unreadable if e.path is None or norm_path(e.path) == key], 1)


def norm_path(path: PathRef) -> str:
    if isinstance(path, StoreLocation):
        return str(path)
    return os.path.normpath(os.path.abspath(os.fspath(path)))


def join_path(base: PathRef, *names: str) -> PathRef:
    """``base`` joined with ``names``: a local path string, or a ``StoreLocation`` of a remote store."""
    if isinstance(base, StoreLocation):
        for name in names:
            base = base / name
        return base
    return os.path.join(base, *names)


def runs(idx: np.ndarray) -> list[tuple[int, int]]:
    """Runs ``[first, last]`` of consecutive values in sorted integer ``idx``."""
    return [(int(idx[lo]), int(idx[hi - 1])) for lo, hi in consecutive_runs(idx)]


Describe = Callable[[int, int], "tuple[int, str, int | None, dict[str, Any]]"]


def report_runs(found: Findings, kind: str, path: str, idx: np.ndarray, describe: Describe) -> None:
    """One anomaly per run of ``idx`` (at most ``MAX_RUNS``, then one summing up the rest).
    ``describe(first, last)`` gives (byte position, message, phy offset, details) of a run."""
    all_runs = runs(np.sort(idx))
    for first, last in all_runs[:MAX_RUNS]:
        position, message, phy, details = describe(first, last)
        found.add(kind, path, position, message, phy, last - first + 1, **details)
    rest = all_runs[MAX_RUNS:]
    if rest:
        position, _, phy, _ = describe(*rest[0])
        n = sum(b - a + 1 for a, b in rest)
        found.add(kind, path, position, f"and {n} more in {len(rest)} further runs like the above, "
                  f"the next starting here", phy, n)


def count_of(n: int, word: str, plural: str | None = None) -> str:
    """``1 entry`` / ``2 entries``."""
    return f"{n} {word if n == 1 else plural or word + 's'}"


def range_text(a: int, b: int) -> str:
    """``7`` / ``7..9``."""
    return str(a) if a == b else f"{a}..{b}"


def span_text(label: str, a: int, b: int, plural: str | None = None) -> str:
    """``queue offset 7`` / ``queue offsets 7..9``."""
    return f"{label} {a}" if a == b else f"{plural or label + 's'} {a}..{b}"

