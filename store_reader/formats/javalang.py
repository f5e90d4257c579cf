"""Java language semantics the broker's decisions depend on, for the Python side of this package.

The broker parses and splits property values with Java's own rules (``Integer.parseInt``,
``String.split``) and computes with wrapping ``int``/``long`` arithmetic; a reader that wants the
broker's answer has to do the same. The native scanner mirrors these in C.
"""
from __future__ import annotations


def java_int(v: int) -> int:
    """``v`` wrapped to a Java ``int`` (32-bit two's complement), as Java int arithmetic does."""
    return ((v + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def java_long(v: int) -> int:
    """``v`` wrapped to a Java ``long`` (64-bit two's complement), as Java long arithmetic does."""
    return ((v + (1 << 63)) & 0xFFFFFFFFFFFFFFFF) - (1 << 63)


def java_split(s: str, sep: str) -> list[str]:
    """``s.split(sep)`` in Java for a one-character, non-regex ``sep`` (limit 0): a leading empty
    part is kept, trailing empty parts are dropped ("a_b_" -> [a, b], "a_" -> [a], "_" -> [],
    "_a" -> ["", a]), and a string without ``sep`` is one part (even "")."""
    if sep not in s:
        return [s]
    parts = s.split(sep)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def java_parse_int(s: str, bits: int = 32) -> int | None:
    """``Integer.parseInt`` (``bits=64``: ``Long.parseLong``) for ASCII input: optional sign, digits,
    in range; None where Java throws NumberFormatException."""
    body = s[1:] if s[:1] in ("+", "-") else s
    if not body or not all("0" <= c <= "9" for c in body):
        return None
    v = int(s)
    return v if -(1 << (bits - 1)) <= v < (1 << (bits - 1)) else None
