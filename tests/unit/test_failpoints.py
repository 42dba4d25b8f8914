"""Failpoints are inert by default and in an install without a checkout, fire once when
armed, and only for their txid. The tests that fire them need a checkout (onceflow_dev): the
wheel's failpoints never fire."""

import pytest
from onceflow import failpoints

pytestmark = pytest.mark.unit
checkout = pytest.mark.checkout


def test_inert_without_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv(failpoints.ENV, raising=False)
    armed = tmp_path / "commit.after_db_commit@t1"
    armed.write_text("raise")
    failpoints.hit("commit.after_db_commit", "t1")  # would raise if it read the folder
    assert armed.exists() and not (tmp_path / "fired.log").exists()


def test_inert_in_an_install_without_a_checkout_whatever_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(failpoints.ENV, str(tmp_path))
    monkeypatch.setattr(failpoints, "in_checkout", lambda: False)
    armed = tmp_path / "commit.after_db_commit@t1"
    armed.write_text("raise")
    failpoints.hit("commit.after_db_commit", "t1")
    assert armed.exists() and not (tmp_path / "fired.log").exists()


@checkout
def test_fires_once_for_its_txid(monkeypatch, tmp_path):
    monkeypatch.setenv(failpoints.ENV, str(tmp_path))
    (tmp_path / "process.fail@t1").write_text("raise")
    failpoints.hit("process.fail", "t2")  # other txid: nothing
    with pytest.raises(failpoints.FailpointError, match="process.fail fired for txid t1"):
        failpoints.hit("process.fail", "t1")
    failpoints.hit("process.fail", "t1")  # one-shot: already fired
    assert "process.fail\tt1\traise" in (tmp_path / "fired.log").read_text()


@checkout
def test_sticky_fires_until_removed_and_wildcard_matches_any_txid(monkeypatch, tmp_path):
    monkeypatch.setenv(failpoints.ENV, str(tmp_path))
    (tmp_path / "process.fail@*").write_text("sticky:raise")
    for txid in ("a", "b", "a"):
        with pytest.raises(failpoints.FailpointError):
            failpoints.hit("process.fail", txid)
    (tmp_path / "process.fail@*").unlink()
    failpoints.hit("process.fail", "a")


@checkout
def test_until_stalls_the_process_until_the_test_releases_it(monkeypatch, tmp_path):
    import threading
    import time

    monkeypatch.setenv(failpoints.ENV, str(tmp_path))
    (tmp_path / "process.before_stage_job@t1").write_text("until:go")
    released = threading.Event()
    hit = threading.Thread(
        target=lambda: (failpoints.hit("process.before_stage_job", "t1"), released.set())
    )
    hit.start()
    time.sleep(0.5)
    assert not released.is_set()  # held while the file is missing
    (tmp_path / "go").touch()
    assert released.wait(5)
    hit.join()
