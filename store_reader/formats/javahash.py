"""Java ``String.hashCode`` as the broker uses it for index keys and tags codes.

Spec ``store-format.md`` §7.3 (index key hash, slot) and §3.9 (tags code). Java hashes **UTF-16 code
units**, not UTF-8 bytes: ``h = 31*h + unit (mod 2**32)``, read back as a signed i32. A character outside
the BMP contributes its two surrogates.

Three layers, all giving identical results:

* :func:`java_string_hash` / :func:`index_key_hash` / :func:`tags_hash`: one string, pure Python. These
  are **the reference**; everything else is tested against them.
* :func:`index_key_hashes` / :func:`java_string_hashes`: a whole column. They use
  ``store_reader._native.java_hashes`` when that extension is importable (and ``STORE_READER_PURE`` is
  not ``1``), else a NumPy path that hashes every all-ASCII string at once (the common case: topic names
  are ASCII and keys usually are) and calls the reference for the rest.
"""
from __future__ import annotations

import sys
from typing import Sequence

import numpy as np
import pyarrow as pa

from store_reader.kernels import native_kernel

__all__ = [
    "INT32_MIN",
    "java_string_hash",
    "index_key_hash",
    "tags_hash",
    "index_key",
    "java_string_hashes",
    "index_key_hashes",
    "index_key_hashes_of",
    "native_available",
]

INT32_MIN = -(1 << 31)
_MASK32 = 0xFFFFFFFF
_UTF16_NATIVE = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"

# Modes of the native ``java_hashes`` entry point (contract with store_reader/_native).
_MODE_RAW = 0      # String.hashCode as a signed i32
_MODE_INDEX = 1    # IndexFile#indexKeyHashMethod: abs(), MIN_VALUE -> 0


def java_string_hash(s: str) -> int:
    """Java ``String.hashCode`` of ``s``.

    Parameters
    ----------
    s
        Any Python string; lone surrogates are hashed as the code unit they are (as Java would).

    Returns
    -------
    int
        The hash as a signed 32-bit value (``-2**31 .. 2**31-1``).
    """
    h = 0
    # Native-order UTF-16 so memoryview can hand out the units directly; surrogatepass keeps a lone
    # surrogate as its own unit, astral characters become their surrogate pair (as in Java).
    data = s.encode(_UTF16_NATIVE, "surrogatepass")
    for unit in memoryview(data).cast("H"):
        h = (31 * h + unit) & _MASK32
    return h - (1 << 32) if h & 0x80000000 else h


def index_key_hash(s: str) -> int:
    """``IndexFile#indexKeyHashMethod``: ``abs(hashCode)``, with ``Integer.MIN_VALUE`` mapped to 0.

    ``Math.abs(Integer.MIN_VALUE)`` stays negative in Java and the broker then uses 0 (spec §7.3).
    """
    h = java_string_hash(s)
    return 0 if h == INT32_MIN else abs(h)


def tags_hash(tags: str | None) -> int:
    """Tags code of a TAGS property value (spec §3.9): ``TAGS.hashCode()``, 0 when absent or empty.

    The value is the signed i32 hash; the broker sign-extends it to the i64 it stores in the CQ entry.
    (The ``SCHEDULE_TOPIC_XXXX`` deliver-time rule is the record decoder's business, not this one.)
    """
    if not tags:
        return 0
    return java_string_hash(tags)


def index_key(topic: str, key: str) -> str:
    """``IndexService#buildKey``: the string that is hashed for an index entry."""
    return topic + "#" + key


# -- vectorised ---------------------------------------------------------------------------------

def native_available() -> bool:
    """True when the compiled ``java_hashes`` will be used (extension present, not forced pure)."""
    return native_kernel("java_hashes") is not None


def _as_string_chunks(keys: pa.Array | pa.ChunkedArray | Sequence[str]) -> list[pa.StringArray]:
    """Normalise the input to a list of ``pa.string()`` arrays (int32 offsets, UTF-8 data)."""
    if isinstance(keys, pa.ChunkedArray):
        chunks = list(keys.chunks)
    elif isinstance(keys, pa.Array):
        chunks = [keys]
    else:
        chunks = [pa.array(list(keys), type=pa.string())]
    out = []
    for c in chunks:
        if c.type != pa.string():
            # large_string / string_view / dictionary: re-layout to the 32-bit offset form
            c = c.cast(pa.string())
        out.append(c)
    return out


# Powers of 31 modulo 2**32, grown on demand (uint32 multiplication wraps mod 2**32 by itself).
_POW31 = np.ones(1, dtype=np.uint32)


def _pow31(n: int) -> np.ndarray:
    global _POW31
    if len(_POW31) < n:
        size = max(n, 2 * len(_POW31))
        p = np.ones(size, dtype=np.uint32)
        # array arithmetic on uint32 wraps modulo 2**32, exactly Java's int overflow
        p[1:] = np.cumprod(np.full(size - 1, 31, dtype=np.uint32), dtype=np.uint32)
        _POW31 = p
    return _POW31[:n]


def _hash_chunk_numpy(arr: pa.StringArray) -> np.ndarray:
    """Raw String.hashCode of every string of ``arr`` (signed int32), NumPy + reference fallback.

    For an ASCII string UTF-8 bytes are the UTF-16 units, so ``h = sum(c_j * 31**(n-1-j)) mod 2**32``
    over its bytes; that is one gather and one segmented sum for the whole array. Strings with a
    non-ASCII byte go through :func:`java_string_hash`.
    """
    n = len(arr)
    out = np.zeros(n, dtype=np.int32)
    if n == 0:
        return out
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int32, count=n + 1, offset=arr.offset * 4)
    data_buf = bufs[2]
    lo, hi = int(offsets[0]), int(offsets[-1])
    if data_buf is None or hi == lo:
        return out  # every string empty (or null): hashCode 0
    data = np.frombuffer(data_buf, dtype=np.uint8, count=hi, offset=0)[lo:]
    starts = offsets[:-1].astype(np.int64) - lo
    ends = offsets[1:].astype(np.int64) - lo
    lengths = ends - starts

    # per byte: owning string and exponent (distance to the string's last byte)
    owner = np.repeat(np.arange(n, dtype=np.int64), lengths)
    exponent = ends[owner] - 1 - np.arange(len(data), dtype=np.int64)
    with np.errstate(over="ignore"):
        terms = data.astype(np.uint32) * _pow31(int(lengths.max()))[exponent]
    nonempty = lengths > 0
    sums = np.zeros(n, dtype=np.uint32)
    if nonempty.any():
        # reduceat over the starts of non-empty strings only (empty segments would misbehave)
        sums[nonempty] = np.add.reduceat(terms, starts[nonempty], dtype=np.uint32)
    out = sums.view(np.int32).copy()

    non_ascii_bytes = data >= 0x80
    if non_ascii_bytes.any():
        bad = np.unique(owner[non_ascii_bytes])
        for i in bad.tolist():  # only the non-ASCII strings; rare in practice
            out[i] = java_string_hash(arr[i].as_py() or "")
    return out


# Bytes hashed per NumPy pass: the pass needs ~20 bytes of temporaries per data byte.
_BLOCK_BYTES = 1 << 22


def _hash_numpy(arr: pa.StringArray) -> np.ndarray:
    """:func:`_hash_chunk_numpy` over slices of at most ~``_BLOCK_BYTES`` of string data each."""
    n = len(arr)
    if n == 0:
        return np.zeros(0, dtype=np.int32)
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32, count=n + 1, offset=arr.offset * 4)
    rel = offsets.astype(np.int64) - int(offsets[0])
    if rel[-1] <= _BLOCK_BYTES:
        return _hash_chunk_numpy(arr)
    cuts = np.unique(np.concatenate((
        [0], np.searchsorted(rel, np.arange(_BLOCK_BYTES, rel[-1], _BLOCK_BYTES), side="right"), [n])))
    return np.concatenate([_hash_chunk_numpy(arr.slice(a, b - a))
                           for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist()) if b > a])


def _hashes(keys: pa.Array | pa.ChunkedArray | Sequence[str], mode: int) -> np.ndarray:
    chunks = _as_string_chunks(keys)
    native = native_kernel("java_hashes")
    parts = []
    for arr in chunks:
        if native is not None:
            bufs = arr.buffers()
            data = bufs[2] if bufs[2] is not None else pa.py_buffer(b"")
            raw = native(bufs[1], data, len(arr), arr.offset, mode)
            # the native side returns one native-endian int32 per string (little-endian on x86/arm)
            h = np.frombuffer(raw, dtype=np.int32).copy()
        else:
            h = _hash_numpy(arr)
            if mode == _MODE_INDEX:
                # abs() in int64 so MIN_VALUE does not wrap, then the broker's MIN_VALUE -> 0 rule
                wide = np.abs(h.astype(np.int64))
                wide[h == INT32_MIN] = 0
                h = wide.astype(np.int32)
        if arr.null_count:
            # a null slot may still span bytes in the data buffer; it hashes as ""
            h[~arr.is_valid().to_numpy(zero_copy_only=False)] = 0
        parts.append(h)
    if not parts:
        return np.zeros(0, dtype=np.int32)
    return np.concatenate(parts) if len(parts) > 1 else parts[0]


def index_key_hashes_of(topics: pa.Array, rows: np.ndarray, keys: pa.Array) -> np.ndarray:
    """:func:`index_key_hashes` of ``index_key(topics[rows[i]], keys[i])`` for every ``i``, without
    building those strings: Java's hash of a concatenation ``a + b`` is ``h(a) * 31**len(b) + h(b)``
    (mod 2**32, ``len`` in UTF-16 units), and an ASCII key has as many units as bytes. A key with
    other bytes is joined and hashed whole, as is the result for a null topic or key (0).

    Returns
    -------
    numpy.ndarray
        int32, non-negative, one keyHash per key.
    """
    keys = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
    keys = keys if keys.type == pa.string() else keys.cast(pa.string())
    n = len(keys)
    if not n:
        return np.zeros(0, dtype=np.int32)
    rows = np.asarray(rows, dtype=np.int64)
    offsets = np.frombuffer(keys.buffers()[1], dtype=np.int32, count=n + 1, offset=keys.offset * 4)
    units = np.diff(offsets).astype(np.int64)
    lo, hi = int(offsets[0]), int(offsets[-1])
    data = np.frombuffer(keys.buffers()[2], dtype=np.uint8, count=hi)[lo:] if hi > lo else np.zeros(0, np.uint8)
    other = np.zeros(n, bool)
    if len(data) and int(data.max()) >= 0x80:
        nonempty = units > 0
        other[nonempty] = np.add.reduceat(data >= 0x80, (offsets[:-1] - lo)[nonempty]) > 0
    powers = _pow31(int(units.max()) + 2)
    with np.errstate(over="ignore"):
        h = (java_string_hashes(topics).view(np.uint32)[rows] * powers[units + 1]
             + np.uint32(ord("#")) * powers[units] + java_string_hashes(keys).view(np.uint32))
    h = h.view(np.int32)
    wide = np.abs(h.astype(np.int64))           # IndexFile#indexKeyHashMethod: abs, MIN_VALUE -> 0
    wide[h == INT32_MIN] = 0
    out = wide.astype(np.int32)
    whole = other | ~keys.is_valid().to_numpy(zero_copy_only=False)
    topic_null = ~topics.is_valid().to_numpy(zero_copy_only=False)
    if topic_null.any():
        whole |= topic_null[rows]
    if whole.any():
        at = np.flatnonzero(whole)
        import pyarrow.compute as pc
        out[at] = index_key_hashes(pc.binary_join_element_wise(
            topics.cast(pa.string()).take(pa.array(rows[at])), keys.take(pa.array(at)), "#"))
    return out


def java_string_hashes(keys: pa.Array | pa.ChunkedArray | Sequence[str]) -> np.ndarray:
    """Vectorised :func:`java_string_hash` (raw signed hash) of every string; nulls hash as ``""`` (0).

    Returns
    -------
    numpy.ndarray
        int32, one value per input string.
    """
    return _hashes(keys, _MODE_RAW)


def index_key_hashes(keys: pa.Array | pa.ChunkedArray | Sequence[str]) -> np.ndarray:
    """Vectorised :func:`index_key_hash` of every (already built, ``topic#key``) index key string.

    Parameters
    ----------
    keys
        A pyarrow string-like array (``string``, ``large_string``, chunked) or a list of ``str``.
        Nulls hash as the empty string (0).

    Returns
    -------
    numpy.ndarray
        int32, non-negative, one keyHash per input string.
    """
    return _hashes(keys, _MODE_INDEX)
