"""The package layout's rules (issue 35): one home per concept, checked on the source tree.

- no import circle among store_reader's modules (imports inside functions count; imports under
  ``TYPE_CHECKING`` do not: they never run);
- no consume queue or index file layout literal (``// 20``, ``* 20``, ``40 +``, ``0x7FFFFFFF``)
  outside ``store_reader/formats/``;
- no entry point in ``jobs/`` imports numpy (an entry point parses its arguments, makes one library
  call and prints);
- ``store_reader/repair/`` reads ``store_reader/broker/``'s results, never its state machines: the
  broker modules that define them (``STATE_MACHINES``: ``ConsumeQueueState``, ``IndexDispatch``,
  ``Dispatched``, ``predict``) only for the type of a result, and from the other broker modules
  functions and constants, never a class;
- store_reader never imports jobs (the library does not depend on its Spark entry points);
- ``io/`` and ``formats/`` import nothing of what a broker does with the files (``broker/``,
  ``repair/``, ``audit/``, ``dump/``, ``testing/``);
- no library module grows into a grab bag again: at most ``MAX_LINES`` lines (``testing/``'s
  synthetic store writer aside; ``broker/recovery.py`` had 1466 and ``repair/write.py`` 1040 before
  they were split by concept).
"""
from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _modules(top: str) -> dict[str, Path]:
    out = {}
    for path in sorted((ROOT / top).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or \
        (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(name: str, path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of every import that runs (not under ``TYPE_CHECKING``), made absolute."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out: list[tuple[str, list[str]]] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for stmt in child.orelse:
                    visit(stmt)
                continue
            if isinstance(child, ast.Import):
                out.extend((a.name, []) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = package[:len(package) - child.level + 1] if child.level else []
                module = ".".join(base + ([child.module] if child.module else []))
                out.append((module, [a.name for a in child.names]))
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    return out


def _graph(top: str) -> dict[str, set[str]]:
    mods = _modules(top)
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        deps = set()
        for module, names in _imports(name, path):
            for n in names or [None]:
                sub = ROOT.joinpath(*f"{module}.{n}".split(".")) if n else None
                if sub is not None and (sub.with_suffix(".pyi").exists() or sub.is_dir()):
                    target = f"{module}.{n}"           # a module (the compiled _native: no source here)
                else:
                    target = f"{module}.{n}" if n and f"{module}.{n}" in mods else module
                if target in mods and target != name:
                    deps.add(target)
        graph[name] = deps
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return out


def test_no_import_circles():
    graph = _graph("store_reader")
    assert len(graph) > 40                    # the tree was read
    assert _circles(graph) == []


def test_circle_finder_finds_one():
    # the check itself: a circle through three modules and one through a package's __init__
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"p": {"p.x"}, "p.x": {"p"}}) == [["p", "p.x"]]


def _layout_literals(source: str) -> list[tuple[int, str]]:
    """``// 20``, ``* 20``, ``20 *``, ``40 +`` and ``0x7FFFFFFF`` in code (not in comments or strings)."""
    tokens = [t for t in tokenize.generate_tokens(io.StringIO(source).readline)
              if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                                tokenize.DEDENT)]
    found = []
    for i, tok in enumerate(tokens):
        if tok.type != tokenize.NUMBER:
            continue
        before = tokens[i - 1].string if i else ""
        after = tokens[i + 1].string if i + 1 < len(tokens) else ""
        value = tok.string.lower().replace("_", "")
        if (value == "20" and (before in ("//", "*") or after == "*")) or (value == "40" and after == "+") \
                or value == "0x7fffffff":
            found.append((tok.start[0], f"{before} {tok.string} {after}".strip()))
    return found


def test_layout_literals_only_in_formats():
    formats = ROOT / "store_reader" / "formats"
    found = []
    for top in ("store_reader", "jobs"):
        for path in sorted((ROOT / top).rglob("*.py")):
            if formats in path.parents:
                continue
            found += [f"{path.relative_to(ROOT)}:{line}: {what}" for line, what in _layout_literals(path.read_text())]
    assert found == []
    # the check itself: code only, not a comment or a string
    sample = "n = size // 20  # 40 + x\ns = '* 20'\nm = crc & 0x7FFFFFFF\nk = 40 + h\nj = 20 * n\n"
    assert [line for line, _ in _layout_literals(sample)] == [1, 3, 4, 5]


def _entry_points() -> dict[str, Path]:
    out = {}
    for path in sorted((ROOT / "jobs").glob("*.py")):
        tree = ast.parse(path.read_text())
        if any(isinstance(n, ast.If) and "__main__" in ast.unparse(n.test) for n in tree.body):
            out[f"jobs.{path.stem}"] = path
    return out


def test_entry_points_do_not_import_numpy():
    entries = _entry_points()
    assert {"jobs.recover", "jobs.audit", "jobs.dump", "jobs.salvage", "jobs.replicas"} <= set(entries)
    importing = sorted(name for name, path in entries.items()
                       if any(m.split(".")[0] == "numpy" for m, _ in _imports(name, path)))
    assert importing == []


# the broker's state machines: its consume queue, index dispatch and replay, and the prediction that runs them
STATE_MACHINES = {"ConsumeQueueState", "IndexDispatch", "Dispatched", "predict"}


def state_machine_modules() -> dict[str, set[str]]:
    """The broker modules defining a ``STATE_MACHINES`` name, and which (found by definition: the rule
    holds whatever the modules are called)."""
    out: dict[str, set[str]] = {}
    for name, path in _modules("store_reader").items():
        if name.split(".")[:2] != ["store_reader", "broker"]:
            continue
        tree = ast.parse(path.read_text())
        defined = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))} & STATE_MACHINES
        if defined:
            out[name] = defined
    return out


def test_repair_reads_broker_results_not_its_state_machines():
    machines = state_machine_modules()
    mods = _modules("store_reader")
    wrong = []
    for name, path in mods.items():
        if name.split(".")[:2] != ["store_reader", "repair"]:
            continue
        for module, names in _imports(name, path):
            if not module.startswith("store_reader.broker"):
                continue
            if ({module} | {f"{module}.{n}" for n in names}) & set(machines):
                wrong.append(f"{name} imports {module} at run time")
            wrong += [f"{name} imports the class {module}.{n}" for n in names if n[:1].isupper() and not n.isupper()]
    assert wrong == []
    # the broker's state machines are all found
    assert set().union(*machines.values()) == STATE_MACHINES


def test_store_reader_does_not_import_jobs():
    mods = _modules("store_reader")
    wrong = [f"{name} imports {module}" for name, path in mods.items()
             for module, _ in _imports(name, path) if module.split(".")[0] == "jobs"]
    assert wrong == []


def test_files_know_nothing_of_the_broker():
    mods = _modules("store_reader")
    above = ("broker", "repair", "audit", "dump", "testing")
    wrong = [f"{name} imports {module}" for name, path in mods.items()
             if name.split(".")[1:2] in (["io"], ["formats"])
             for module, names in _imports(name, path)
             for target in [module] + [f"{module}.{n}" for n in names]
             if target.split(".")[:1] == ["store_reader"] and target.split(".")[1:2] and
             target.split(".")[1] in above]
    assert sorted(set(wrong)) == []


# a module above this is doing several things: split it by concept (as recovery.py and write.py were)
MAX_LINES = 900


def test_no_module_is_a_grab_bag():
    sizes = {name: len(path.read_text().splitlines()) for name, path in _modules("store_reader").items()
             if not name.startswith("store_reader.testing")}
    assert len(sizes) > 40
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}
