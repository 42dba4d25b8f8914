"""A transform reference "module:function" checked against its module's source when the
pipelines file is parsed, without importing the module (the dag-processor parses the file
constantly, and a user's module imports PySpark): a misspelled function then fails the
pipeline's definition, naming what the module does define, instead of its first process
task.

Only what the source shows is judged: a module that cannot be found as a file on the search
path (a compiled or zipped one, or one present only where Spark runs), or that may define
names dynamically (`__getattr__`, `from x import *`), is left to process, which imports it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path


def module_source(module: str, folders: Iterable[Path]) -> Path | None:
    """The source file of dotted `module` in the first folder that has it, or None."""
    parts = module.split(".")
    for folder in folders:
        base = Path(folder).joinpath(*parts)
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


# (path, mtime, size) -> defined_names: the dag-processor parses the pipelines file again
# and again, and many pipelines share a module; a changed source is read again.
_NAMES: dict[tuple[str, int, int], set[str] | None] = {}


def defined_names(source: Path) -> set[str] | None:
    """The names the module's top level binds, or None when its source cannot tell
    (unreadable, a syntax error process will report, dynamic names)."""
    try:
        stat = source.stat()
    except OSError:
        return None
    key = (str(source), stat.st_mtime_ns, stat.st_size)
    if key not in _NAMES:
        _NAMES[key] = _read_names(source)
    return _NAMES[key]


def _read_names(source: Path) -> set[str] | None:
    try:
        tree = ast.parse(source.read_text(), filename=str(source))
    except (OSError, SyntaxError, ValueError):
        return None
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*":
                    return None
                names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return None if "__getattr__" in names else names


def reference_problem(spec: str, folders: Iterable[Path]) -> str | None:
    """Why `spec` ("module:function") cannot name a function of its module, as far as the
    module's source shows; None when it can, or when the source cannot tell."""
    module, _, function = spec.partition(":")
    source = module_source(module, folders)
    if source is None:
        return None
    names = defined_names(source)
    if names is None or function in names:
        return None
    public = sorted(n for n in names if not n.startswith("_"))
    return (
        f"module {module!r} ({source}) defines no {function!r}; it defines "
        f"{', '.join(public) or 'nothing public'}"
    )
