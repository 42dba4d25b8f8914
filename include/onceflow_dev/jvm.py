"""The JVM artifacts of a checkout: resolved from Maven Central by `mvn`, pinned in pom.xml.

`make setup` runs `python -m onceflow_dev.jvm resolve`: for each profile of the checkout's
pom.xml (PROFILES) Maven copies the profile's runtime classpath into
`<venv>/share/onceflow/jvm/<profile>/` in the repository's layout
(`group/path/artifact/version/artifact-version.jar`), so an error can name the artifact. The local Maven repository (~/.m2) keeps what was downloaded: a
second `make setup` asks Maven offline first and needs no network.

Maven does not check what its local repository holds, so every copied jar is opened and read
through (a truncated download would otherwise surface as a broker that fails to start): a
corrupt one fails setup with its coordinates and the file to delete.

Nothing is built: the project never compiles or commits a jar.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterable
from pathlib import Path

from onceflow_dev import CHECKOUT

#: profile -> what it is for, in pom.xml's words
PROFILES = {
    "kafka-broker": "Apache Kafka's broker, with a log4j2 binding",
    "kafka-connect": "Kafka Connect with Debezium's PostgreSQL connector (change data capture)",
    "spark-kafka": "Spark's own Kafka connector (the benchmark's peer)",
    "jdbc": "PostgreSQL's JDBC driver (the peer's sink)",
    "spark-avro": "spark-avro's from_avro (the bench's JVM way of decoding Avro)",
}
#: per profile, the artifacts (groupId:artifactId) it exists for: a profile folder without one
#: is not resolved, whatever else it holds
MAIN_ARTIFACTS = {
    "kafka-broker": ("org.apache.kafka:kafka_2.13", "org.apache.logging.log4j:log4j-slf4j2-impl"),
    "kafka-connect": (
        "org.apache.kafka:connect-runtime",
        "io.debezium:debezium-connector-postgres",
    ),
    "spark-kafka": ("org.apache.spark:spark-sql-kafka-0-10_2.13",),
    "jdbc": ("org.postgresql:postgresql",),
    "spark-avro": ("org.apache.spark:spark-avro_2.13",),
}
JVM_DIR_ENV = "ONCEFLOW_JVM_DIR"
MVN_INSTALL_HINT = (
    "install Apache Maven 3.8+: Debian's package `maven` (`apt-get install maven`; "
    "`make system-deps` does it as root)"
)


def console_log4j2(levels: dict[str, str]) -> str:
    """A log4j2 configuration that logs to stdout (a service's log file) at info, with these
    loggers' `levels` (name -> level): Kafka 4's jars carry none of their own."""
    lines = [
        "status = warn",
        "appender.out.type = Console",
        "appender.out.name = out",
        "appender.out.layout.type = PatternLayout",
        "appender.out.layout.pattern = [%d] %p %m (%c)%n",
        "rootLogger.level = info",
        "rootLogger.appenderRef.out.ref = out",
    ]
    for i, (name, level) in enumerate(levels.items()):
        lines += [f"logger.l{i}.name = {name}", f"logger.l{i}.level = {level}"]
    return "\n".join(lines) + "\n"


class JvmArtifactsError(RuntimeError):
    """A JVM artifact is missing or unreadable; the message names it and the next step."""


def jvm_dir() -> Path:
    """Where the resolved classpaths live: ONCEFLOW_JVM_DIR, else the venv's share folder."""
    raw = os.environ.get(JVM_DIR_ENV)
    return Path(raw) if raw else Path(sys.prefix) / "share" / "onceflow" / "jvm"


def classpath(profile: str) -> list[Path]:
    """The jars of `profile`, checked to be resolved (its main artifacts are there)."""
    folder = jvm_dir() / profile
    jars = sorted(folder.rglob("*.jar")) if folder.is_dir() else []
    present = {coordinates(jar.relative_to(folder)).rpartition(":")[0] for jar in jars}
    for artifact in MAIN_ARTIFACTS[profile]:
        if artifact not in present:
            raise JvmArtifactsError(
                f"{PROFILES[profile]}: {artifact} is not in {folder}; "
                f"run `make setup`, which resolves it from Maven Central (pom.xml, profile {profile})"
            )
    return jars


def java() -> str:
    """The java launcher: JAVA_HOME's, else the one on PATH (Kafka 4 and Spark 4 need 17+)."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise JvmArtifactsError(
            "java not found: install a Java 17+ runtime (Debian: openjdk-17-jre-headless)"
        )
    return found


def java_command(
    profile: str, main: str, heap: str, log4j2: Path, options: Iterable[str] = ()
) -> list[str]:
    """The command line of a JVM service: `main` of `profile`'s classpath, with a heap of at
    most `heap`, its logging configured by the file `log4j2`, and `options` besides."""
    return [
        java(),
        f"-Xmx{heap}",
        "-Xms64m",
        "-XX:+UseG1GC",
        *options,
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={log4j2}",
        "-cp",
        os.pathsep.join(str(jar) for jar in classpath(profile)),
        main,
    ]


def check_jar(jar: Path, folder: Path) -> None:
    """Open and read `jar` (inside `folder`) through; a corrupt one raises JvmArtifactsError
    naming its artifact."""
    try:
        with zipfile.ZipFile(jar) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError) as exc:
        bad = str(exc)
    if bad is not None:
        relative = jar.relative_to(folder)
        raise JvmArtifactsError(
            f"{jar.name} is corrupt ({bad}): Maven's local repository holds a broken copy of "
            f"{coordinates(relative)}; delete {local_repository() / relative.parent} and run "
            f"`make setup` again"
        )


def coordinates(relative: Path) -> str:
    """groupId:artifactId:version of a jar at `relative` in the repository's layout
    (org/apache/kafka/kafka_2.13/4.4.0/kafka_2.13-4.4.0.jar)."""
    *group, artifact, version, _file = relative.parts
    return f"{'.'.join(group)}:{artifact}:{version}"


def local_repository() -> Path:
    """Maven's local repository (MAVEN_REPO_LOCAL if set, else Maven's default)."""
    raw = os.environ.get("MAVEN_REPO_LOCAL")
    return Path(raw) if raw else Path.home() / ".m2" / "repository"


def _mvn(profile: str, pom: Path, into: Path, offline: bool) -> subprocess.CompletedProcess:
    argv = [
        shutil.which("mvn") or "mvn", "-B", "-q", "-f", str(pom), "-P", profile,
        *(["-o"] if offline else []),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={into}", "-DincludeScope=runtime", "-Dmdep.useRepositoryLayout=true",
    ]  # fmt: skip
    if os.environ.get("MAVEN_REPO_LOCAL"):
        argv.append(f"-Dmaven.repo.local={os.environ['MAVEN_REPO_LOCAL']}")
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def _errors(result: subprocess.CompletedProcess) -> str:
    lines = (result.stdout + result.stderr).splitlines()
    wanted = [line for line in lines if "ERROR" in line] or lines
    return "\n".join(wanted[-12:])


def resolve(pom: Path, target: Path, profiles: Iterable[str] = tuple(PROFILES), echo=print) -> None:
    """Copy each profile's classpath into `target/<profile>` (replacing what was there only
    once the new copy is complete and every jar reads through)."""
    if shutil.which("mvn") is None:
        raise JvmArtifactsError(f"setup: mvn not found; {MVN_INSTALL_HINT}")
    target.mkdir(parents=True, exist_ok=True)
    for profile in profiles:
        what = PROFILES[profile]
        partial = target / f".{profile}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        source = "offline, from Maven's local repository"
        result = _mvn(profile, pom, partial, offline=True)
        if result.returncode != 0:  # not all in the local repository yet: ask Maven Central
            shutil.rmtree(partial, ignore_errors=True)
            source = "from Maven Central"
            result = _mvn(profile, pom, partial, offline=False)
        if result.returncode != 0:
            shutil.rmtree(partial, ignore_errors=True)
            raise JvmArtifactsError(
                f"setup: Maven could not resolve {what} (pom.xml, profile {profile}):\n"
                f"{_errors(result)}"
            )
        jars = sorted(partial.rglob("*.jar"))
        for jar in jars:
            check_jar(jar, partial)
        final = target / profile
        shutil.rmtree(final, ignore_errors=True)
        partial.rename(final)
        jars = classpath(profile)  # its main artifacts are there
        size = sum(jar.stat().st_size for jar in jars) / 2**20
        echo(f"setup: {what}: {len(jars)} jars ({size:.0f} MiB, {source}) in {final}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m onceflow_dev.jvm",
        description="Resolve the checkout's JVM artifacts (pom.xml) from Maven Central with mvn.",
    )
    parser.add_argument("command", choices=["resolve", "check"])
    parser.add_argument("--pom", type=Path, default=CHECKOUT / "pom.xml")
    args = parser.parse_args(argv)
    try:
        if args.command == "resolve":
            resolve(args.pom, jvm_dir())
        else:
            for profile in PROFILES:
                for jar in classpath(profile):
                    check_jar(jar, jvm_dir() / profile)
    except JvmArtifactsError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
