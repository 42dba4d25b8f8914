"""The runtime package's shape, as issue 24 set it: rules a newcomer can rely on.

- no import cycle among the modules of `onceflow` and `onceflow_dev` (imports inside
  functions count: a cycle closed by a late import is still a cycle; imports under
  `if TYPE_CHECKING:` do not, they never run), package `__init__`s included: importing a
  module runs its packages' `__init__`s first, so a module depends on them, and a package
  whose `__init__` imports its own modules closes a cycle. A face is the one exception: an
  `__init__` that defines nothing and only hands on names of its own modules (errors'), or
  looks them up on first use (airflow's `__getattr__`); its modules never import it;
- at most MAX_LOOSE modules at the top of `onceflow`, each a concept of the protocol; every
  other module lives in a package named for its role;
- no module of the runtime package over MAX_LINES lines;
- the ledger is the ground floor: `onceflow.ledger` imports nothing of the runtime but itself,
  the errors, the offset ranges and the platform's compat, not even under TYPE_CHECKING (what
  it asks of a pipeline, a sink or a registry is a protocol of ledger.contracts), and every SQL
  statement on a table of the ledger's schema is one of its modules';
- the house stands on at most MAX_FLOORS floors (each runtime folder a room, the tooling one);
- a sink is composed (at most two levels below Sink), asks its mode rather than naming it, and
  needs no bind step (what depends on the output is its StageWriter's);
- a batch state is spelled only in onceflow/ledger/states.py (SQL passes states as parameters);
- every docs/PROTOCOL.md section a docstring or comment cites exists.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

pytestmark = [pytest.mark.unit, pytest.mark.checkout]

ROOT = Path(__file__).resolve().parents[2]
INCLUDE = ROOT / "include"
RUNTIME = INCLUDE / "onceflow"
PACKAGES = ("onceflow", "onceflow_dev")
MAX_LINES = 400
MAX_LOOSE = 8


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (INCLUDE / package).rglob("*.py"):
            parts = path.relative_to(INCLUDE).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _type_checking_only(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of `known` that module `name` imports, anywhere but under TYPE_CHECKING."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        if _type_checking_only(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if full in known:
                    out.add(full)
                elif base in known:
                    out.add(base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    out.discard(name)
    return out


def import_graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imports_of(name, path, set(found)) for name, path in found.items()}


def is_face(name: str, path: Path) -> bool:
    """A package `__init__` that defines nothing and only hands on names of its own modules
    (at import, or on first use from a module `__getattr__`)."""
    if path.name != "__init__.py":
        return False
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Expr | ast.Import):
            continue
        if isinstance(node, ast.ImportFrom):
            if node.module == "__future__" or node.module == "typing":
                continue
            own = node.module == name or (node.module or "").startswith(name + ".")
            if node.level or not own:
                return False
            continue
        if isinstance(node, ast.Assign) and [getattr(t, "id", "") for t in node.targets] == [
            "__all__"
        ]:
            continue
        if isinstance(node, ast.For | ast.Delete) and not any(
            isinstance(n, ast.Import | ast.ImportFrom | ast.FunctionDef | ast.ClassDef)
            for n in ast.walk(node)
        ):  # e.g. errors' names given the package as their module
            continue
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
            inner = [n for n in ast.walk(node) if isinstance(n, ast.ImportFrom)]
            if all(n.module == name or (n.module or "").startswith(name + ".") for n in inner):
                continue
        return False
    return True


def load_graph(graph: dict[str, set[str]], faces: set[str]) -> dict[str, set[str]]:
    """`graph` with what importing a module also runs: its packages' `__init__`s (a face's
    are left out: it imports nothing its modules need)."""
    out = {name: set(deps) for name, deps in graph.items()}
    for name in graph:
        parts = name.split(".")
        for i in range(1, len(parts)):
            package = ".".join(parts[:i])
            if package in graph and package not in faces:
                out[name].add(package)
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

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
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def test_the_cycle_finder_finds_a_cycle_closed_inside_a_function(tmp_path):
    """The rule's own check: a late import closing a loop is reported."""
    (tmp_path / "a.py").write_text("import b\n")
    (tmp_path / "b.py").write_text("def f():\n    import a\n")
    (tmp_path / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import a\n"
    )
    known = {"a", "b", "c"}
    graph = {m: imports_of(m, tmp_path / f"{m}.py", known) for m in known}
    assert graph == {"a": {"b"}, "b": {"a"}, "c": set()}
    assert cycles(graph) == [["a", "b"]]


def test_a_package_init_that_imports_its_own_modules_closes_a_cycle(tmp_path):
    """The rule's own check: `p/__init__` importing `p.m` is a cycle (importing `p.m` runs
    `p/__init__` first), unless `p/__init__` is a face."""
    (tmp_path / "p").mkdir()
    init, module = tmp_path / "p" / "__init__.py", tmp_path / "p" / "m.py"
    module.write_text("X = 1\n")
    init.write_text("from p.m import X\n\nY = X + 1\n")
    found = {"p": init, "p.m": module}
    graph = {m: imports_of(m, path, set(found)) for m, path in found.items()}
    faces = {m for m, path in found.items() if is_face(m, path)}
    assert faces == set() and cycles(load_graph(graph, faces)) == [["p", "p.m"]]
    init.write_text('"""A face."""\n\nfrom p.m import X\n\n__all__ = ["X"]\n')
    faces = {m for m, path in found.items() if is_face(m, path)}
    assert faces == {"p"} and cycles(load_graph(graph, faces)) == []
    module.write_text("from p import X\n")  # a face's module importing the face
    graph = {m: imports_of(m, path, set(found)) for m, path in found.items()}
    assert cycles(load_graph(graph, faces)) == [["p", "p.m"]]


def test_no_import_cycle_in_the_packages():
    found = modules()
    graph = import_graph()
    assert "onceflow.commit" in graph and graph["onceflow.commit"]  # the graph is real
    faces = {name for name, path in found.items() if is_face(name, path)}
    assert {"onceflow.errors", "onceflow.airflow"} <= faces
    assert cycles(load_graph(graph, faces)) == []


def test_at_most_a_handful_of_modules_stay_loose_at_the_top():
    loose = sorted(p.stem for p in RUNTIME.glob("*.py") if p.name != "__init__.py")
    assert "commit" in loose
    assert len(loose) <= MAX_LOOSE, loose


def test_no_runtime_module_is_over_max_lines():
    sizes = {
        str(p.relative_to(INCLUDE)): len(p.read_text().splitlines()) for p in RUNTIME.rglob("*.py")
    }
    assert len(sizes) > 40
    assert {p: n for p, n in sizes.items() if n > MAX_LINES} == {}


# all the ledger may import of the runtime (the module docstring)
LEDGER_FLOOR = ("onceflow.ledger", "onceflow.errors", "onceflow.ranges", "onceflow.compat")


def test_the_ledger_imports_nothing_above_it():
    found = []
    for path in (RUNTIME / "ledger").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            found += [
                f"{path.relative_to(INCLUDE)}:{node.lineno}: {name}"
                for name in names
                if name.split(".")[0] == "onceflow"
                and not any(name == m or name.startswith(m + ".") for m in LEDGER_FLOOR)
            ]
    assert found == []


def _docstrings(tree: ast.AST) -> set[int]:
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }


def test_only_the_ledger_runs_sql_on_its_tables():
    tables = {
        m.group(1)
        for path in (RUNTIME / "migrations").glob("*.sql")
        for m in re.finditer(
            r"create table (?:if not exists )?onceflow\.(\w+)", path.read_text(), re.I
        )
    }
    assert {"batches", "ranges", "stage_parts", "dead_letters"} <= tables
    named = re.compile(rf"\bonceflow\.({'|'.join(sorted(tables))})\b")
    statement = re.compile(r"\b(select|insert|update|delete|join)\b", re.I)
    found = []
    for path in RUNTIME.rglob("*.py"):
        if path.is_relative_to(RUNTIME / "ledger"):
            continue
        tree = ast.parse(path.read_text())
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docs
                and named.search(node.value)
                and statement.search(node.value)
            ):
                found.append(f"{path.relative_to(INCLUDE)}:{node.lineno}: {node.value[:80]}")
    assert found == []


def test_only_the_ledger_and_its_hook_hold_a_dsn():
    """In the runtime, outside ledger/ and hooks/, the ledger's database is a Ledger
    (onceflow.ledger.db), which keeps its DSN, the password in it, to itself: no parameter,
    field or attribute there is named for a DSN. (The embedded stack's settings,
    onceflow_dev, make the stack's database and keep its DSN.)"""
    found = []
    for path in RUNTIME.rglob("*.py"):
        if path.is_relative_to(RUNTIME / "ledger") or path.is_relative_to(RUNTIME / "hooks"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.arg):
                name = node.arg
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                name = node.target.id
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                name = node.attr
            else:
                continue
            if "dsn" in name.lower():
                found.append(f"{path.relative_to(INCLUDE)}:{node.lineno}: {name}")
    assert found == []


# The house as issue 50 drew it: each folder of the runtime one room, each top-level module
# one, the checkout's tooling one; a room stands on the floor above everything it imports.
# The DAG file and the bench stand above these, so the whole house has MAX_FLOORS + 1.
MAX_FLOORS = 10


def room(module: str) -> str:
    parts = module.split(".")
    return parts[0] if parts[0] != "onceflow" else ".".join(parts[:2])


def floors(graph: dict[str, set[str]]) -> dict[str, int]:
    """Each room's floor: 1 for a room that imports no other, else one above its highest."""
    rooms: dict[str, set[str]] = {}
    for name, deps in graph.items():
        rooms.setdefault(room(name), set()).update(room(d) for d in deps if room(d) != room(name))
    found: dict[str, int] = {}

    def floor(r: str) -> int:
        if r not in found:
            found[r] = 1 + max((floor(d) for d in rooms.get(r, ())), default=0)
        return found[r]

    return {r: floor(r) for r in rooms}


def test_the_floors_finder_stacks_rooms_by_their_imports():
    graph = {"onceflow.a.x": {"onceflow.b"}, "onceflow.a.y": set(), "onceflow.b": {"onceflow.c"}}
    assert floors(graph | {"onceflow.c": set()}) == {
        "onceflow.a": 3,
        "onceflow.b": 2,
        "onceflow.c": 1,
    }


def test_the_house_stands_on_few_floors():
    """A room low in the house imports little; each floor more is one more layer a reader
    crosses to see what a module rests on. The ledger stands on floor 3 or lower."""
    found = floors(import_graph())
    assert found["onceflow.ledger"] <= 3
    assert found["onceflow.errors"] == 1 and found["onceflow.airflow"] > found["onceflow.commit"]
    assert max(found.values()) <= MAX_FLOORS, sorted(found.items(), key=lambda rf: -rf[1])


def sink_depths() -> dict[str, int]:
    """How many levels each class of sinks/ stands below Sink (by its bases' names; a class
    that does not descend from Sink is left out)."""
    bases = {}
    for path in (RUNTIME / "sinks").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases[node.name] = [b.id for b in node.bases if isinstance(b, ast.Name)]

    def depth(name: str) -> int | None:
        if name == "Sink":
            return 0
        below = [d for b in bases.get(name, ()) if (d := depth(b)) is not None]
        return 1 + max(below) if below else None

    return {n: d for n in bases if n != "Sink" and (d := depth(n)) is not None}


def test_a_sink_is_composed_not_a_tower():
    """A sink is made of parts (a PostgreSQL sink's tables and mode, a lake sink's table
    format, stage and audit, a Kafka sink's audit), not a tower of subclasses: none stands
    more than two levels below Sink."""
    depths = sink_depths()
    assert depths["PostgresSink"] == 1
    assert depths["KafkaSink"] == depths["LakeSink"] == 2
    assert {n: d for n, d in depths.items() if d > 2} == {}


# What depends on the transform's output; a sink that held it would need a bind step
OUTPUT_BOUND = {"stage_columns", "file_stage", "bind_output", "bound"}


def test_a_sink_is_ready_once_made():
    """A sink needs no bind step: what depends on the transform's output (the stage's columns,
    where its files go) is a StageWriter's (sinks.stage_writer), which process gets from
    Sink.stage_writer complete; no sink class defines it."""
    sinks = set(sink_depths()) | {"Sink"}
    found = []
    for path in (RUNTIME / "sinks").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.name in sinks:
                found += [
                    f"{node.name}.{f.name}"
                    for f in node.body
                    if isinstance(f, ast.FunctionDef) and f.name in OUTPUT_BOUND
                ]
    assert "LakeSink" in sinks and found == []


def test_no_sink_asks_which_mode_it_has():
    """A sink's mode is an object that the sink asks (sinks.postgres.mode, sinks.lake.modes):
    no code in sinks/ compares a mode's name."""
    found = []
    for path in (RUNTIME / "sinks").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare):
                continue
            operands = [node.left, *node.comparators]
            if any(isinstance(o, ast.Attribute) and o.attr == "mode" for o in operands):
                found.append(f"{path.relative_to(INCLUDE)}:{node.lineno}")
    assert found == []


STATE_WORDS = ("planned", "processing", "staged", "committed", "abandoned")


def test_a_state_is_spelled_only_in_states_py():
    """A quoted state word anywhere else in the runtime (SQL text included) is a second
    place a state is defined; ledger/states.py's enum is the one."""
    words = "|".join(STATE_WORDS)
    quoted = re.compile(rf"""(['"])({words})\1""")
    found = []
    for path in RUNTIME.rglob("*.py"):
        if path == RUNTIME / "ledger" / "states.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if quoted.search(line):
                found.append(f"{path.relative_to(INCLUDE)}:{number}: {line.strip()}")
    assert found == []


def test_every_cited_protocol_section_exists():
    headings = {
        m.group(1).strip()
        for m in re.finditer(r"^#+ (.+)$", (ROOT / "docs" / "PROTOCOL.md").read_text(), re.M)
    }
    cited = re.compile(r'PROTOCOL\.md\)?\s*"([^"]+)"')
    missing = []
    for path in [
        *INCLUDE.rglob("*.py"),
        *INCLUDE.rglob("*.sql"),
        ROOT / "README.md",
        *ROOT.glob("docs/*.md"),
    ]:
        # a citation may wrap: join lines, dropping comment markers
        text = re.sub(r"\s*\n\s*(?:--|#)?\s*", " ", path.read_text())
        for m in cited.finditer(text):
            if m.group(1) not in headings:
                missing.append(f"{path.relative_to(ROOT)}: {m.group(1)!r}")
    assert missing == []
