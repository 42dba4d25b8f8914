"""process_mode = "connect": the stage job in a session of a long-lived Spark Connect server.

Starting Spark is most of a small batch's time with spark-submit (a JVM, its Python workers
and their first job: about 20 s of a 1,000-record run, issue 26). A Spark Connect server
(pyspark's own, started by `onceflow-dev up` locally; in production its endpoint comes from an
Airflow connection of type spark_connect) keeps them warm: the process task runs the same
attempt in its own Python process (onceflow.process.entry.run_attempt), and only the stage
job's plan travels to the server.

Every protocol rule holds unchanged: the attempt is claimed before anything is read, the
tasks stage under the part fence, the reader's counts and the fast form's stage go through
the ledger (onceflow.ledger.stage_jobs: a Connect session has neither accumulators nor
local properties), dead letters are staged as with spark-submit. A server that goes away
mid-job fails the attempt (the client gives up after a few short retries, `_RETRIES`), and
the task's retry claims a new attempt that replays the range.

The session: one per pipeline and version of the code it ships, named by `session_id`, so
that every batch of the pipeline finds its Python workers warm, and a changed transform
module gets a fresh session (the server refuses to replace a shipped file in a session).
The task leaves it open for the next batch (it only closes its client), and the next batch
finds it prepared (its settings set, its files shipped: `_prepare`); sessions are isolated, so
pipelines do not see each other's files or settings.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from onceflow.config.pipeline import PipelineConfig
from onceflow.errors import ConfigError
from onceflow.process.session import SPARK_DEFAULTS
from onceflow.spark.shipping import py_files

log = logging.getLogger("onceflow.process")

# The session settings process needs: spark-submit's SQL defaults. The rest of those (the
# UI, worker reuse, speculation, the workers' Python and daemon) belong to the server.
SESSION_DEFAULTS = {k: v for k, v in SPARK_DEFAULTS.items() if k.startswith("spark.sql.")}

# A Connect client retries an unreachable server for about ten minutes by default; a
# process attempt gives up after a few seconds instead, so that a server restart is a failed
# attempt that the task's retry replays.
_RETRIES = {"max_retries": 3, "max_backoff": 1000}

# what pyspark's builder sets to switch this process to Spark Connect (pyspark.sql.utils),
# and whether the sessions open now switched it
_CONNECT_MODE = "SPARK_CONNECT_MODE_ENABLED"
_switch = threading.Lock()
_open_sessions = 0
_switched = False

_NAMESPACE = uuid.UUID("6f1d3c2a-9b7e-4d1a-8c55-0e6f0c1a7b21")


def session_url(url: str, session_id: str) -> str:
    """The Connect URL `url` (sc://host:port/;params, SparkConnectHook.get_connection_url)
    with `session_id` among its parameters."""
    base, sep, params = url.partition("/;")
    if not sep:
        base, params = url.rstrip("/"), ""
    kept = [p for p in params.split(";") if p and not p.startswith("session_id=")]
    return f"{base}/;" + ";".join([*kept, f"session_id={session_id}"])


def session_id(pipeline: str, files: list[str]) -> str:
    """The pipeline's session for the code it ships: a digest of the files' contents."""
    digests = [hashlib.sha256(Path(f).read_bytes()).hexdigest() for f in files]
    return str(
        uuid.uuid5(_NAMESPACE, json.dumps([pipeline, [Path(f).name for f in files], digests]))
    )


class ConnectSpark:
    """Sessions of the Spark Connect server at `url` (a SparkSource)."""

    def __init__(self, url: str, description: str = "") -> None:
        self.url = url
        self.description = description or "the Spark Connect server"
        self._running: dict[str, Any] = {}  # the jobs' tags of the sessions open now
        self._lock = threading.Lock()

    def interrupt(self) -> int:
        """Interrupt the jobs of the sessions open now on the server (a killed task's: the
        server would run them on after the task is gone); how many sessions had one."""
        with self._lock:
            running = list(self._running.items())
        for tag, spark in running:
            _interrupt(spark, tag)
        return len(running)

    @contextmanager
    def session(self, cfg: PipelineConfig, ship_package: bool) -> Iterator[Any]:
        global _open_sessions, _switched
        with _switch:
            if _open_sessions == 0:
                _switched = _CONNECT_MODE not in os.environ
            _open_sessions += 1
        try:
            yield from self._session(cfg, ship_package)
        finally:
            with _switch:
                _open_sessions -= 1
                # the last session of the process: a spark-submit it starts later (another
                # pipeline's process task) must not inherit pyspark's switch to Connect
                if _open_sessions == 0 and _switched:
                    os.environ.pop(_CONNECT_MODE, None)

    def _session(self, cfg: PipelineConfig, ship_package: bool) -> Iterator[Any]:
        from pyspark.sql import SparkSession
        from pyspark.sql.connect.client.retries import DefaultPolicy

        with tempfile.TemporaryDirectory(prefix="onceflow-py-files-") as folder:
            # the executors of a Connect server are never this process's: ship the module
            files = py_files(cfg.transform, "connect", ship_package, Path(folder))
            sid = session_id(cfg.name, files)
            try:
                # pyspark's own builder: it also switches pyspark.sql.functions and the
                # rest to Spark Connect in this process (a transform imports those)
                spark = SparkSession.builder.remote(session_url(self.url, sid)).create()
                spark.client.set_retry_policies([DefaultPolicy(**_RETRIES)])
                _prepare(spark, {**SESSION_DEFAULTS, **cfg.spark_conf}, files, cfg.name)
            except ConfigError:
                raise
            except Exception as e:
                raise ConnectionError(
                    f"process of pipeline {cfg.name!r}: no session from {self.description}: "
                    f"{_first_line(e)}"
                ) from None
        log.info("spark connect session %s of %s", sid, self.description)
        tag = f"onceflow-{uuid.uuid4()}"
        spark.addTag(tag)
        with self._lock:
            self._running[tag] = spark
        try:
            yield spark
        except BaseException:
            _interrupt(spark, tag)  # its tasks still running on the server: a retry replays
            raise
        finally:
            with self._lock:
                self._running.pop(tag, None)
            spark.client.close()  # not stop(): that would release the warm session


# the session's own setting that says it holds the settings and files of `_prepare`'s
# digest: a warm session is prepared by its first batch, and the next ones find it so
_PREPARED = "spark.onceflow.session.prepared"


def _prepare(spark: Any, settings: dict[str, str], files: list[str], pipeline: str) -> None:
    """Set `settings` in the session and ship `files` to its Python path, unless the session
    already holds them (its _PREPARED setting names their digest): one round trip then, where
    preparing it takes one per setting and file. The files' contents are in the session's id
    already (session_id); a server that lost the session (a restart) makes a new one, which
    is prepared again."""
    names = [Path(f).name for f in files]  # a zip is written anew into a new folder each time
    digest = hashlib.sha256(json.dumps([sorted(settings.items()), names]).encode()).hexdigest()
    if spark.conf.get(_PREPARED, None) == digest:
        if files:
            log.info("on the session's Python path already: %s", ", ".join(files))
        return
    for key, value in settings.items():
        _set(spark, key, value, pipeline)
    if files:
        _ship(spark, files)
        log.info("shipped to the session's Python path: %s", ", ".join(files))
    spark.conf.set(_PREPARED, digest)


def _interrupt(spark: Any, tag: str) -> None:
    try:
        spark.interruptTag(tag)
    except Exception as e:  # noqa: BLE001 - the server may be gone
        log.warning("could not interrupt the job on the server: %s", _first_line(e))


def _ship(spark: Any, files: list[str]) -> None:
    """Add `files` to the session's Python path. The pipeline's runs in flight add the same
    files to the same session at once, and the server refuses the second copy of a file it
    is still moving into place (FileAlreadyExistsException): added again a moment later,
    the same file is accepted (a changed one never is: ARTIFACT_ALREADY_EXISTS, raised)."""
    for attempt in range(_SHIP_TRIES):
        try:
            spark.addArtifacts(*files, pyfile=True)
            return
        except Exception as e:
            if "FileAlreadyExistsException" not in str(e) or attempt == _SHIP_TRIES - 1:
                raise
            time.sleep(0.2 * (attempt + 1))


_SHIP_TRIES = 5


def _set(spark: Any, key: str, value: str, pipeline: str) -> None:
    try:
        spark.conf.set(key, value)
    except Exception as e:
        if "CANNOT_MODIFY" in str(e) or "STATIC" in str(e).upper():
            raise ConfigError(
                f"pipeline {pipeline!r}: spark_conf {key} cannot be set in a Spark Connect "
                'session (process_mode = "connect"): it is the server\'s; set it where the '
                "server starts"
            ) from None
        raise


def _first_line(e: BaseException) -> str:
    """The error's first line, a Connect URL's token masked (the connection's password)."""
    text = _TOKEN.sub(r"\1***", str(e).strip())
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"


_TOKEN = re.compile(r"(token=)[^;\s'\"]+")
