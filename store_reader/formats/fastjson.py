"""fastjson 1.x text, as the broker writes and reads its config files (``store-format.md`` §10).

fastjson 1.x writes map keys that are integers **without quotes** (``{0:250,1:248}``) and indents with
tabs, so the files are not strict JSON. :func:`parse_fastjson` accepts that, plus what fastjson's
default parser features tolerate on reading (unquoted field names, single-quoted strings, stray
commas). It is a small tokenizer + recursive-descent parser; nothing is ``eval``'d.
:func:`to_fastjson` writes the broker's form back (a file read and written again unchanged keeps
its bytes). Both ``config`` (the config files) and ``rocksdbcq`` (the consumer offsets kept in
RocksDB) read it.
"""
from __future__ import annotations

import json
import os
import re
from typing import Any

from store_reader.exceptions import ConfigError

# -- parser -------------------------------------------------------------------------------------

_TOKEN = re.compile(r"""
    (?P<ws>[ \t\r\n\f\v\ufeff]+)
  | (?P<dq>"(?:[^"\\]|\\.)*")
  | (?P<sq>'(?:[^'\\]|\\.)*')
  | (?P<num>-?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)
  | (?P<word>[A-Za-z_$][A-Za-z0-9_$]*)
  | (?P<punct>[{}\[\]:,])
""", re.VERBOSE | re.DOTALL)

_LITERALS = {"true": True, "false": False, "null": None}


class _ParseError(Exception):
    def __init__(self, message: str, char_pos: int) -> None:
        super().__init__(message)
        self.char_pos = char_pos


def _tokenize(text: str) -> list[tuple[str, str, int]]:
    tokens = []
    pos = 0
    for m in _TOKEN.finditer(text):
        if m.start() != pos:
            raise _ParseError(f"unexpected character {text[pos]!r}", pos)
        pos = m.end()
        kind = m.lastgroup
        if kind != "ws":
            tokens.append((kind, m.group(), m.start()))  # type: ignore[arg-type]
    if pos != len(text):
        what = "unterminated string" if text[pos] in "\"'" else f"unexpected character {text[pos]!r}"
        raise _ParseError(what, pos)
    return tokens


def _string(kind: str, tok: str, pos: int) -> str:
    if kind == "sq":
        # re-quote as a JSON string: \' -> ', bare " -> \", other escapes unchanged
        inner = re.sub(r"""\\(.)|\"""", lambda m: '\\"' if m.group(0) == '"'
                       else ("'" if m.group(1) == "'" else m.group(0)), tok[1:-1], flags=re.DOTALL)
        tok = '"' + inner + '"'
    if "\\" not in tok:
        return tok[1:-1]
    try:
        return json.loads(tok, strict=False)
    except json.JSONDecodeError as exc:
        raise _ParseError(f"bad escape in string: {exc.msg}", pos + exc.pos) from None


def _number(tok: str) -> int | float:
    return int(tok) if re.fullmatch(r"-?[0-9]+", tok) else float(tok)


class _Parser:
    def __init__(self, tokens: list[tuple[str, str, int]], end: int) -> None:
        self.tokens = tokens
        self.i = 0
        self.end = end

    def peek(self) -> tuple[str, str, int]:
        return self.tokens[self.i] if self.i < len(self.tokens) else ("eof", "", self.end)

    def take(self) -> tuple[str, str, int]:
        tok = self.peek()
        self.i += 1
        return tok

    def value(self) -> Any:
        kind, tok, pos = self.take()
        if kind == "punct" and tok == "{":
            return self.obj()
        if kind == "punct" and tok == "[":
            return self.arr()
        if kind in ("dq", "sq"):
            return _string(kind, tok, pos)
        if kind == "num":
            return _number(tok)
        if kind == "word" and tok in _LITERALS:
            return _LITERALS[tok]
        raise _ParseError(f"expected a value, found {tok or 'end of text'!r}", pos)

    def skip_commas(self) -> None:
        # fastjson's AllowArbitraryCommas (a default feature) tolerates ",," and trailing commas
        while self.peek()[:2] == ("punct", ","):
            self.i += 1

    def obj(self) -> dict:
        out: dict = {}
        while True:
            self.skip_commas()
            kind, tok, pos = self.take()
            if (kind, tok) == ("punct", "}"):
                return out
            if kind in ("dq", "sq"):
                key: Any = _string(kind, tok, pos)
            elif kind == "num":
                key = _number(tok)  # fastjson writes integer map keys unquoted
            elif kind == "word":
                key = tok           # unquoted field name (AllowUnQuotedFieldNames)
            else:
                raise _ParseError(f"expected a key or '}}', found {tok or 'end of text'!r}", pos)
            kind, tok, pos = self.take()
            if (kind, tok) != ("punct", ":"):
                raise _ParseError(f"expected ':' after key {key!r}, found {tok or 'end of text'!r}", pos)
            out[key] = self.value()  # a repeated key overwrites, as Java's map put does
            kind, tok, pos = self.peek()
            if (kind, tok) not in (("punct", ","), ("punct", "}")):
                raise _ParseError(f"expected ',' or '}}', found {tok or 'end of text'!r}", pos)

    def arr(self) -> list:
        out: list = []
        while True:
            self.skip_commas()
            if self.peek()[:2] == ("punct", "]"):
                self.i += 1
                return out
            out.append(self.value())
            kind, tok, pos = self.peek()
            if (kind, tok) not in (("punct", ","), ("punct", "]")):
                raise _ParseError(f"expected ',' or ']', found {tok or 'end of text'!r}", pos)


def parse_fastjson(text: str, *, path: str | os.PathLike[str] | None = None) -> Any:
    """Parse JSON as fastjson 1.x writes and reads it.

    Accepts standard JSON plus unquoted integer map keys (returned as ``int`` keys), unquoted field
    names, single-quoted strings, repeated/trailing commas and tabs. Blank text or ``null`` gives None
    (fastjson returns null there, and the broker then keeps an empty table).

    Raises
    ------
    ConfigError
        Not decodable; the error names ``path`` and the **byte** position (UTF-8) of the problem.
    """
    try:
        tokens = _tokenize(text)
        if not tokens:
            return None
        p = _Parser(tokens, len(text))
        value = p.value()
        kind, tok, pos = p.peek()
        if kind != "eof":
            raise _ParseError(f"text continues after the JSON value: {tok!r}", pos)
        return value
    except _ParseError as exc:
        raise ConfigError(f"not decodable as fastjson: {exc}", path,
                          len(text[:exc.char_pos].encode("utf-8", "surrogatepass"))) from None
    except RecursionError:
        raise ConfigError("not decodable as fastjson: nesting too deep", path) from None


# -- writer -------------------------------------------------------------------------------------

def to_fastjson(value: Any, depth: int = 0) -> str:
    """``value`` as the broker persists a config file (``RemotingSerializable#toJson(pretty)``,
    fastjson 1.x, F§10): tabs, integer map keys unquoted, an int-keyed map on one line with its
    closing brace on the next, no newline at the end. Keys keep ``value``'s order."""
    if isinstance(value, dict):
        if not value:
            return "{}"
        close = "\n" + "\t" * depth + "}"
        if all(isinstance(k, int) for k in value):
            return "{" + ",".join(f"{k}:{to_fastjson(v, depth + 1)}" for k, v in value.items()) + close
        tabs = "\t" * (depth + 1)
        return "{\n" + ",\n".join(f"{tabs}{json.dumps(str(k), ensure_ascii=False)}:{to_fastjson(v, depth + 1)}"
                                   for k, v in value.items()) + close
    if isinstance(value, list):
        return "[" + ",".join(to_fastjson(v, depth + 1) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)
