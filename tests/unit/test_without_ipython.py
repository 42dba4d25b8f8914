"""A process attempt makes `import IPython` fail at once where IPython is not installed
(onceflow.process.session._without_ipython): pyspark tries that import at every DataFrame
and Column call to record its call site."""

from __future__ import annotations

import sys

import pytest
from onceflow.process import session

pytestmark = pytest.mark.unit


@pytest.fixture
def modules(monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    absent = object()
    before = sys.modules.pop("IPython", absent)  # None if an attempt ran here already
    yield
    sys.modules.pop("IPython", None)
    if before is not absent:
        sys.modules["IPython"] = before


def test_without_ipython_installed_its_import_fails_without_a_search(modules, monkeypatch):
    from pyspark.errors.utils import _capture_call_site

    session._without_ipython()
    searched = []
    monkeypatch.setattr(sys, "meta_path", [_Recorder(searched), *sys.meta_path])
    with pytest.raises(ImportError):
        import IPython  # noqa: F401
    assert searched == []  # no finder was asked
    assert __file__ in _capture_call_site(1)  # pyspark still records the call site


def test_an_installed_ipython_is_left_alone(modules, tmp_path):
    (tmp_path / "IPython").mkdir()
    (tmp_path / "IPython" / "__init__.py").write_text("HERE = True\n")
    sys.path.insert(0, str(tmp_path))
    session._without_ipython()
    import IPython

    assert IPython.HERE


class _Recorder:
    def __init__(self, searched: list[str]) -> None:
        self.searched = searched

    def find_spec(self, name, path=None, target=None):
        self.searched.append(name)
        return None
