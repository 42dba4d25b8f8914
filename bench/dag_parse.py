"""The bench's DAG-parse section: how long the dag-processor takes to parse a DAG file of
PIPELINES pipelines (the two-line file of docs/install-into-airflow.md), recorded as
`dag_parse` {pipelines, parse_s (median), runs}.

A pipelines file of PIPELINES pipelines (the four kinds of sink in turn, each transform in
the orders example's module) is parsed by a fresh Python, as the dag-processor parses a file
in a process of its own, with Onceflow's DAG factory already imported (the scheduler's
preload, onceflow.airflow.preload): what is timed is reading the file and declaring its
DAGs. The DAG file reads no connection (docs/operating.md), so no Airflow is needed around
it. A task process parses the same file for its own DAG, which Airflow's parsing context
names: timed too (`task_parse_s`), with the context naming one pipeline's DAG. Nothing here
is used by the product.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

PIPELINES = 500
RUNS = 3
SINKS = (
    'table = "t{i}"\nmode = "append"\n',
    'kind = "iceberg"\ntable = "lake.t{i}"\n',
    'kind = "kafka"\ntopic = "out{i}"\n',
    'kind = "delta"\ntable = "lake.d{i}"\n',
)
PARSE = """
import json, sys, time
import onceflow.airflow.dag_factory  # the scheduler's preload
from onceflow.airflow import pipelines_dags
t0 = time.perf_counter()
dags = pipelines_dags(sys.argv[1])
print(json.dumps({"dags": len(dags), "parse_s": time.perf_counter() - t0}))
"""


def write_pipelines(folder: Path, pipelines: int) -> Path:
    """The DAG file beside a pipelines file of `pipelines` pipelines."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pipelines.toml").write_text(
        "".join(
            f'[pipelines.p{i}]\ntopics = ["t{i}"]\ntransform = "orders:transform"\n'
            f"[pipelines.p{i}.sink]\n" + SINKS[i % len(SINKS)].format(i=i)
            for i in range(pipelines)
        )
    )
    dag_file = folder / "flows.py"
    dag_file.write_text(
        "from onceflow.airflow import pipelines_dags\n\nglobals().update(pipelines_dags(__file__))\n"
    )
    return dag_file


def run(work: Path, spark_jobs: Path, pipelines: int = PIPELINES, say=print) -> dict:
    dag_file = write_pipelines(work / "dag-parse", pipelines)
    env = {
        "PATH": "/usr/bin:/bin",
        "AIRFLOW_HOME": str(work / "dag-parse" / "airflow"),
        "ONCEFLOW_SPARK_JOBS": str(spark_jobs),
    }
    # the parsing context's variable, as a task runner sets it
    from airflow.sdk.definitions.context import _AIRFLOW_PARSING_CONTEXT_DAG_ID as CONTEXT

    times = parse_times(dag_file, env, pipelines)
    task = parse_times(dag_file, {**env, CONTEXT: "onceflow_p1"}, 1)
    parse_s, task_s = statistics.median(times), statistics.median(task)
    say(f"dag parse: {pipelines} pipelines in {parse_s:.2f} s, a task's {task_s:.2f} s "
        f"(medians of {RUNS})")  # fmt: skip
    return {
        "pipelines": pipelines,
        "parse_s": round(parse_s, 3),
        "runs": [round(t, 3) for t in times],
        "task_parse_s": round(task_s, 3),
    }


def parse_times(dag_file: Path, env: dict[str, str], dags: int) -> list[float]:
    """RUNS parses of `dag_file`, each in a fresh Python, which must declare `dags` DAGs."""
    times = []
    for _ in range(RUNS):
        out = subprocess.run(
            [sys.executable, "-c", PARSE, str(dag_file)],
            env=env, capture_output=True, text=True, timeout=600, check=True,
        )  # fmt: skip
        seen = json.loads(out.stdout.splitlines()[-1])
        if seen["dags"] != dags:
            raise RuntimeError(f"the DAG file declared {seen['dags']} DAGs, not {dags}")
        times.append(seen["parse_s"])
    return times


def section(r: dict) -> list[str]:
    return [
        "",
        "## Parsing the DAG file",
        "",
        f"A DAG file of {r['pipelines']} pipelines (all four kinds of sink) is parsed in "
        f"**{r['parse_s']:.2f} s** (median of {len(r['runs'])}, a fresh Python each, the DAG "
        "factory preloaded as the scheduler has it); the target is under 5 s. The DAG file "
        "reads no connection, and a transform module's source is read once per parse."
        + (
            f" A task process, whose parse Airflow's parsing context names its DAG, builds "
            f"that pipeline's DAG alone: **{r['task_parse_s']:.2f} s** (the whole file still "
            "read and validated)."
            if "task_parse_s" in r
            else ""
        ),
    ]
