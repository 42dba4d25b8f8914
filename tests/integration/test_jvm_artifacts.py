"""The JVM artifacts of pom.xml (onceflow_dev.jvm): pinned where Python is pinned, and a missing
or corrupt one named, with the next step, before anything tries to run it."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from onceflow_dev import jvm

pytestmark = pytest.mark.checkout

ROOT = Path(__file__).resolve().parents[2]


def pom_property(name: str) -> str:
    match = re.search(rf"<{re.escape(name)}>([^<]+)</", (ROOT / "pom.xml").read_text())
    assert match, f"pom.xml has no <{name}>"
    return match.group(1)


@pytest.mark.unit
def test_spark_s_connector_is_pinned_at_the_locked_pyspark():
    """Spark's connectors must match pyspark exactly (Scala 2.13, same Spark version)."""
    import pyspark

    locked = re.search(r"^pyspark==(\S+)$", (ROOT / "requirements.lock").read_text(), re.M)
    assert locked and pom_property("spark.version") == locked.group(1) == pyspark.__version__


@pytest.mark.unit
def test_a_profile_not_resolved_is_named_with_make_setup(tmp_path, monkeypatch):
    monkeypatch.setenv(jvm.JVM_DIR_ENV, str(tmp_path))
    with pytest.raises(
        jvm.JvmArtifactsError, match=r"org\.apache\.kafka:kafka_2\.13 is not in .*make setup"
    ):
        jvm.classpath("kafka-broker")


@pytest.mark.unit
def test_without_mvn_setup_names_the_package_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(jvm.JvmArtifactsError, match=r"mvn not found.*package `maven`"):
        jvm.resolve(ROOT / "pom.xml", tmp_path / "jvm")


def overlay(real: Path, into: Path, relative: Path) -> Path:
    """A local repository at `into` that is `real` through symlinks except along `relative`,
    whose folders are copies (so a file there can be broken without touching `real`)."""
    here, there = into, real
    for part in relative.parts:
        here.mkdir(parents=True, exist_ok=True)
        for child in there.iterdir():
            if child.name != part:
                (here / child.name).symlink_to(child)
        here, there = here / part, there / part
    shutil.copytree(there, here)
    return here


@pytest.mark.integration  # mvn offline on the local repository that `make setup` filled
def test_a_corrupt_jar_in_the_local_repository_fails_setup_naming_the_artifact(
    tmp_path, monkeypatch
):
    version = pom_property("postgresql-jdbc.version")
    real = jvm.local_repository()
    relative = Path("org/postgresql/postgresql") / version
    if not (real / relative).is_dir():
        pytest.fail(f"{real / relative} is missing: run `make setup` first")
    copy = overlay(real, tmp_path / "m2", relative)
    jar = copy / f"postgresql-{version}.jar"
    jar.write_bytes(jar.read_bytes()[: jar.stat().st_size // 2])  # a download cut short
    monkeypatch.setenv("MAVEN_REPO_LOCAL", str(tmp_path / "m2"))
    target = tmp_path / "jvm"
    with pytest.raises(jvm.JvmArtifactsError) as refused:
        jvm.resolve(ROOT / "pom.xml", target, profiles=["jdbc"], echo=lambda _m: None)
    message = str(refused.value)
    assert f"org.postgresql:postgresql:{version}" in message
    assert f"delete {copy}" in message
    assert not (target / "jdbc").exists()  # nothing half-resolved left where the peer looks
    # the intact repository resolves the same profile, offline: no network once it is filled
    monkeypatch.delenv("MAVEN_REPO_LOCAL")
    said: list[str] = []
    jvm.resolve(ROOT / "pom.xml", target, profiles=["jdbc"], echo=said.append)
    assert "offline, from Maven's local repository" in said[0]
    monkeypatch.setenv(jvm.JVM_DIR_ENV, str(target))
    assert any(p.name == f"postgresql-{version}.jar" for p in jvm.classpath("jdbc"))
    assert os.listdir(target) == ["jdbc"]
