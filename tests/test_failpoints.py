"""Failpoints are inert by default, fire once when armed, and only for their txid."""

import pytest
from onceflow import failpoints

pytestmark = pytest.mark.unit


def test_inert_without_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv(failpoints.ENV, raising=False)
    armed = tmp_path / "commit.after_db_commit@t1"
    armed.write_text("raise")
    failpoints.hit("commit.after_db_commit", "t1")  # would raise if it read the folder
    assert armed.exists() and not (tmp_path / "fired.log").exists()


def test_fires_once_for_its_txid(monkeypatch, tmp_path):
    monkeypatch.setenv(failpoints.ENV, str(tmp_path))
    (tmp_path / "process.fail@t1").write_text("raise")
    failpoints.hit("process.fail", "t2")  # other txid: nothing
    with pytest.raises(failpoints.FailpointError, match="process.fail fired for txid t1"):
        failpoints.hit("process.fail", "t1")
    failpoints.hit("process.fail", "t1")  # one-shot: already fired
    assert "process.fail\tt1\traise" in (tmp_path / "fired.log").read_text()


def test_sticky_fires_until_removed_and_wildcard_matches_any_txid(monkeypatch, tmp_path):
    monkeypatch.setenv(failpoints.ENV, str(tmp_path))
    (tmp_path / "process.fail@*").write_text("sticky:raise")
    for txid in ("a", "b", "a"):
        with pytest.raises(failpoints.FailpointError):
            failpoints.hit("process.fail", txid)
    (tmp_path / "process.fail@*").unlink()
    failpoints.hit("process.fail", "a")
