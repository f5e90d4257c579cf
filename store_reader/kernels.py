"""Which implementation runs: the compiled ``store_reader._native`` or its pure twins.

``STORE_READER_PURE`` set (to anything but ``0``) selects the twins everywhere: the scanner's
(``_pyscan``) and those of the kernels beside it (the NumPy paths in ``javahash`` and
``indexfile``). The CI's second tier runs the reader tests that way.
"""
from __future__ import annotations

import os
from typing import Any, Callable


def use_pure() -> bool:
    return os.environ.get("STORE_READER_PURE", "") not in ("", "0")


def native_kernel(name: str) -> Callable[..., Any] | None:
    """``store_reader._native.<name>``, or None where the twins are selected or the extension is
    not built (the caller then runs its twin)."""
    if use_pure():
        return None
    try:
        from store_reader import _native  # type: ignore[attr-defined]
    except ImportError:
        return None
    return getattr(_native, name, None)
