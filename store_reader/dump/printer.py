"""How ``jobs.dump`` prints: one line per record / entry, as text or JSON lines, on one stream, and
the value formats every file kind's printer shares. The printers themselves are per file kind:
``store_reader.dump.commitlog`` (segments), ``store_reader.dump.files`` (consume queue, index, checkpoint and config
files), ``store_reader.dump.storedir`` (the store overview). Decoding is ``store_reader``'s; these only format.
"""
from __future__ import annotations

import base64
import datetime as dt
import json
from pathlib import Path
from typing import Any, Callable, TextIO

import numpy as np

from store_reader.io.storefs import StoreLocation

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def iso_ms(ms: int | None) -> str:
    """Epoch milliseconds as ISO-8601 UTC (the raw number when out of range)."""
    if ms is None:
        return "-"
    try:
        return (_EPOCH + dt.timedelta(milliseconds=ms)).isoformat(timespec="milliseconds") \
            .replace("+00:00", "Z")
    except OverflowError:
        return str(ms)


class Printer:
    """Text lines or JSON lines on one stream."""

    def __init__(self, out: TextIO, as_json: bool) -> None:
        self.out = out
        self.json = as_json

    def emit(self, text: str | Callable[[], str], obj: dict[str, Any] | Callable[[], dict[str, Any]]
             ) -> None:
        """Print ``obj`` (JSON mode) or ``text``; either may be a callable, built only if used."""
        if self.json:
            value = obj() if callable(obj) else obj
            self.out.write(json.dumps(value, ensure_ascii=False, default=_json_default) + "\n")
        else:
            self.out.write((text() if callable(text) else text) + "\n")


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (Path, StoreLocation)):   # a file of a remote store: its URI
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
