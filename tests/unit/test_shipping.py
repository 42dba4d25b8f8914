"""What process ships to the executors (onceflow.spark.shipping): the user transform's module as its
file or its top-level package zipped, onceflow zipped on request, and when."""

from __future__ import annotations

import subprocess
import sys
import uuid
import zipfile
from pathlib import Path

import pytest
from onceflow.spark.shipping import py_files, ships_user_code

pytestmark = pytest.mark.unit


@pytest.fixture
def jobs(tmp_path, monkeypatch):
    """A spark_jobs folder outside the repository, a fresh module name, and a folder for zips."""
    folder = tmp_path / "jobs"
    folder.mkdir()
    monkeypatch.setenv("ONCEFLOW_SPARK_JOBS", str(folder))
    monkeypatch.setattr(sys, "path", list(sys.path))
    name = f"user_{uuid.uuid4().hex[:8]}"
    out = tmp_path / "out"
    out.mkdir()
    yield folder, name, out
    for mod in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[mod]


@pytest.mark.parametrize(
    ("master", "ship_package", "ships"),
    [
        ("local", False, False),
        ("local[2]", False, False),
        ("local[*]", False, False),
        ("local[2,3]", False, False),
        ("local[2]", True, True),
        ("local-cluster[2,1,1024]", False, True),
        ("spark://127.0.0.1:7077", False, True),
        ("yarn", False, True),
        ("k8s://https://api.cluster:6443", False, True),
    ],
)
def test_the_user_module_is_shipped_when_the_master_is_not_local(master, ship_package, ships):
    assert ships_user_code(master, ship_package) is ships


def test_a_top_level_module_is_shipped_as_its_file(jobs):
    folder, name, out = jobs
    (folder / f"{name}.py").write_text("def transform(df):\n    return df\n")
    assert py_files(f"{name}:transform", "local[2]", False, out) == []
    assert py_files(f"{name}:transform", "spark://h:7077", False, out) == [
        str(folder / f"{name}.py")
    ]


def test_a_module_in_a_package_ships_the_top_level_package_zipped(jobs):
    folder, name, out = jobs
    pkg = folder / name
    (pkg / "sub" / "__pycache__").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "helpers.py").write_text("def upper(s):\n    return s.upper()\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "mod.py").write_text(
        f"from {name}.helpers import upper\n\ndef transform(df):\n    return upper(df)\n"
    )
    (pkg / "sub" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"stale")
    (path,) = py_files(f"{name}.sub.mod:transform", "yarn", False, out)
    assert Path(path).parent == out
    assert sorted(zipfile.ZipFile(path).namelist()) == [
        f"{name}/__init__.py",
        f"{name}/helpers.py",
        f"{name}/sub/__init__.py",
        f"{name}/sub/mod.py",
    ]
    # an executor with nothing but the zip on its path imports the module and its imports
    code = f"import sys; sys.path.insert(0, {path!r}); from {name}.sub.mod import transform; print(transform('ok'))"
    run = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True)
    assert (run.returncode, run.stdout, run.stderr) == (0, "OK\n", "")


def test_ship_package_adds_onceflow_zipped_in_any_mode(jobs):
    folder, name, out = jobs
    (folder / f"{name}.py").write_text("def transform(df):\n    return df\n")
    zipped, module = py_files(f"{name}:transform", "local[2]", True, out)
    assert module == str(folder / f"{name}.py")
    names = zipfile.ZipFile(zipped).namelist()
    shipped = {"onceflow/__init__.py", "onceflow/spark/shipping.py", "onceflow/process/entry.py"}
    assert shipped <= set(names)
    assert all(n.startswith("onceflow/") and "__pycache__" not in n for n in names)


def test_the_users_modules_the_transform_imported_are_shipped_with_it(jobs):
    """A helper module next to the transform's (imported by it) goes too: executors without
    the user's folder import both; modules from elsewhere (pyspark, onceflow) do not."""
    folder, name, out = jobs
    (folder / f"{name}_helpers.py").write_text("def upper(s):\n    return s.upper()\n")
    (folder / f"{name}.py").write_text(
        f"from {name}_helpers import upper\n\ndef transform(df):\n    return upper(df)\n"
    )
    try:
        files = py_files(f"{name}:transform", "spark://h:7077", False, out)
        assert files == [str(folder / f"{name}.py"), str(folder / f"{name}_helpers.py")]
    finally:
        sys.modules.pop(f"{name}_helpers", None)


def test_a_module_reached_through_a_link_to_the_users_folder_is_shipped(jobs, tmp_path):
    """A helper imported through a linked folder, or as a linked file, resolves into the
    user's folder and goes with the transform; one linked from outside it does not."""
    folder, name, out = jobs
    (folder / f"{name}_helpers.py").write_text("def upper(s):\n    return s.upper()\n")
    (folder / f"{name}.py").write_text(
        f"import {name}_helpers, {name}_linked, {name}_outside\n\n"
        "def transform(df):\n    return df\n"
    )
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / f"{name}_linked.py").symlink_to(folder / f"{name}_helpers.py")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / f"{name}_outside.py").write_text("X = 1\n")
    (linked / f"{name}_outside.py").symlink_to(elsewhere / f"{name}_outside.py")
    via = tmp_path / "via"
    via.symlink_to(linked)
    sys.path.insert(0, str(via))
    try:
        files = py_files(f"{name}:transform", "spark://h:7077", False, out)
        assert files[0] == str(folder / f"{name}.py")
        assert sorted(files[1:]) == sorted(
            [str(folder / f"{name}_helpers.py"), str(via / f"{name}_linked.py")]
        )
    finally:
        for m in ("_helpers", "_linked", "_outside"):
            sys.modules.pop(f"{name}{m}", None)


def test_after_the_preload_only_the_module_files_imported_since_are_resolved(jobs, monkeypatch):
    """The preload resolves the modules' files once (resolve_module_files); a task process
    forked after it resolves only those imported since, and still finds the user's modules
    among those resolved before (whatever the transform path was then)."""
    from onceflow.spark import shipping

    folder, name, out = jobs
    (folder / f"{name}_early.py").write_text("X = 1\n")
    (folder / f"{name}.py").write_text(
        f"import {name}_early\n\ndef transform(df):\n    return df\n"
    )
    monkeypatch.setenv("ONCEFLOW_SPARK_JOBS", str(out))  # the early module's folder: not yet
    sys.path.insert(0, str(folder))
    # as in a process that resolved none
    monkeypatch.setattr(shipping, "_seen", frozenset())
    monkeypatch.setattr(shipping, "_seen_files", {})
    try:
        __import__(f"{name}_early")
        shipping.resolve_module_files()
        before = {
            str(Path(f).parent)
            for m in list(sys.modules.values())
            if isinstance(f := getattr(m, "__file__", None), str)
        } - {str(folder)}
        monkeypatch.setenv("ONCEFLOW_SPARK_JOBS", str(folder))
        resolved = []
        real = shipping.os.path.realpath
        monkeypatch.setattr(
            shipping.os.path, "realpath", lambda p, **kw: resolved.append(str(p)) or real(p, **kw)
        )
        files = py_files(f"{name}:transform", "spark://h:7077", False, out)
        assert files == [str(folder / f"{name}.py"), str(folder / f"{name}_early.py")]
        # the transform's folder (its module's, the transform path's), and none of the
        # thousands of modules imported before (a module another test's thread imports
        # meanwhile may be resolved: it is new)
        assert str(folder) in resolved, resolved
        assert not [p for p in resolved if p in before or str(Path(p).parent) in before], resolved
    finally:
        sys.modules.pop(f"{name}_early", None)


def test_a_user_module_resolved_by_the_preload_and_gone_since_is_not_shipped(jobs, monkeypatch):
    """A module of the user's folder that the preload resolved and that has left
    sys.modules since (a test, a reload) is not among the files: only what is imported now
    goes with the transform."""
    from onceflow.spark import shipping

    folder, name, out = jobs
    (folder / f"{name}_gone.py").write_text("X = 1\n")
    (folder / f"{name}.py").write_text("def transform(df):\n    return df\n")
    sys.path.insert(0, str(folder))
    monkeypatch.setattr(shipping, "_seen", frozenset())
    monkeypatch.setattr(shipping, "_seen_files", {})
    __import__(f"{name}_gone")
    shipping.resolve_module_files()
    del sys.modules[f"{name}_gone"]
    assert py_files(f"{name}:transform", "spark://h:7077", False, out) == [
        str(folder / f"{name}.py")
    ]
