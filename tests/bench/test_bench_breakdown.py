"""The process job's profile (bench/breakdown.py): each sample goes to the first stage one of
its frames matches, a process's CPU is split by its samples' shares, and the driver JVM
records to its file beside the class archive's option."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import breakdown  # noqa: E402

pytestmark = [pytest.mark.unit, pytest.mark.checkout]

FETCH = "fetch (librdkafka consume)"
COPY = "stage COPY (client side: binary rows, psycopg2)"
ARROW = "Arrow (building, casting)"
FAST_FORM = "decode + transform (fast form)"
START_UP = "start-up (imports)"


def test_py_spy_samples_go_to_the_stage_of_their_innermost_stage_frame():
    copy = "main (worker.py:1);stage (fast_stage.py:9);copy_rows (table_stage.py:3)"
    split = f"{copy};read (table_stage.py:9);__next__ (fast_stage.py:97)"
    raw = "\n".join(
        [
            # the COPY's CSV of the fast form's rows: the COPY, not Arrow, not the transform
            f"{copy};to_csv (pyarrow/csv.py:2) 7",
            # the fast form, pulled by the COPY's reads: the fast form, Arrow's compute its own
            f"{split};fast_form (spark_jobs/orders.py:440);wrapper (pyarrow/compute.py:257) 5",
            # the fetch, pulled by the fast form: the fetch
            f"{split};records (librdkafka_fetch.py:5);consume (<built-in>) 3",
            "main (worker.py:1);batch (record_batches.py:4);from_arrays (pyarrow/array.py:1) 2",
            "main (worker.py:1);wait (selectors.py:1) 1",
            # a worker forked by the daemon run as a module: runpy at its root is no import
            "_run_code (<frozen runpy>:88);<module> (spark_daemon.py:47);main (worker.py:9) 4",
            "main (worker.py:1);_find_and_load (<frozen importlib._bootstrap>:1176) 6",
            "not a sample line",
        ]
    )
    assert breakdown.pyspy_stages(raw) == Counter(
        {COPY: 7, START_UP: 6, FAST_FORM: 5, FETCH: 3, ARROW: 2, "other": 5}
    )


def test_jfr_samples_are_staged_by_their_java_frames():
    def event(*frames: str, thread: str = "Executor task l") -> dict:
        return {
            "values": {
                "sampledThread": {"osName": thread},
                "stackTrace": {
                    "frames": [
                        {
                            "method": {
                                "type": {"name": f.rsplit(".", 1)[0]},
                                "name": f.rsplit(".", 1)[1],
                            }
                        }
                        for f in frames
                    ]
                },
            }
        }

    printed = json.dumps(
        {
            "recording": {
                "events": [
                    event("org/codehaus/janino/UnitCompiler.compile", "org.apache.spark.sql.X.run"),
                    event("org.apache.spark.api.python.PythonRunner.read", "java.lang.Thread.run"),
                    event("java.lang.Object.wait"),
                    event("org.codehaus.janino.Parser.parse", thread="Thread-12"),
                    event(
                        "java.util.zip.ZipFile.getEntry",
                        "jdk.internal.loader.ClassLoaders$AppClassLoader.loadClass",
                        "org.apache.spark.SparkContext.<init>",
                        thread="Thread-4",
                    ),
                    {"values": {}},
                ]
            }
        }
    )
    assert breakdown.jfr_stages(printed) == {
        "Spark task threads": Counter({"codegen (Janino)": 1, "Python runner I/O": 1, "other": 1}),
        "py4j calls of the driver's Python": Counter(
            {"codegen (Janino)": 1, "Spark session start": 1}
        ),
        "other": Counter({"other": 1}),
    }


def test_a_processs_cpu_is_split_by_its_samples_shares():
    assert breakdown.split(10.0, Counter(a=3, b=1)) == {"a": 7.5, "b": 2.5}
    assert breakdown.split(10.0, Counter()) == {}


@pytest.mark.parametrize(
    ("name", "group"),
    [
        ("C2 CompilerThre", "JIT compilers"),
        ("G1 Conc#0", "garbage collector"),
        ("Executor task l", "Spark task threads"),
        ("stdout writer f", "Python runner I/O threads"),
        ("netty-rpc-env-t", "other"),
        ("main", "driver main thread"),
        ("Thread-3", "py4j calls of the driver's Python"),
    ],
)
def test_jvm_threads_are_grouped_by_their_names(name, group):
    assert breakdown.thread_group(name) == group


def test_the_driver_jvm_records_beside_the_class_archives_option(tmp_path):
    jfr = tmp_path / "p.jfr"
    cmd = [
        "spark-submit",
        "--conf",
        "spark.driver.extraJavaOptions=-XX:SharedArchiveFile=a",
        "x.py",
    ]
    out = breakdown.with_jfr(cmd, jfr)
    assert (
        out[2]
        == f"spark.driver.extraJavaOptions=-XX:SharedArchiveFile=a {breakdown.jfr_option(jfr)}"
    )
    plain = breakdown.with_jfr(["spark-submit", "x.py"], jfr)
    assert plain == [
        "spark-submit",
        "--conf",
        f"spark.driver.extraJavaOptions={breakdown.jfr_option(jfr)}",
        "x.py",
    ]
