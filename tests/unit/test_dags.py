"""The DAG folder imports cleanly and declares plan -> process -> commit per pipeline."""

import json
import os
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]


def test_dag_folder_imports_without_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    monkeypatch.setenv("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    monkeypatch.setenv("ONCEFLOW_PIPELINES", str(ROOT / "dags" / "pipelines.toml"))
    from conftest import DagBag

    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert bag.import_errors == {}
    dag = bag.dags["onceflow_orders"]
    assert [t.task_id for t in dag.topological_sort()] == ["plan", "process", "commit"]
    process = dag.get_task("process")
    assert process.application.endswith("onceflow/spark_app/process.py")
    commit = dag.get_task("commit")
    assert type(commit).__name__ == "CommitOperator"
    assert commit.poll_interval == 2.0  # waits as a trigger in the triggerer, not in a worker
    # an XCom is an Execution API call: plan's only where spark-submit's process reads it,
    # commit's never (its summary is the Asset event's extra)
    assert dag.get_task("plan").do_xcom_push and not commit.do_xcom_push
    # the txid reaches every phase the same way: the run id, read from the task's context by
    # one base operator (test_process_entry.py), never templated
    from onceflow.airflow.tasks import TxidOperator

    for task in dag.tasks:
        assert isinstance(task, TxidOperator), task.task_id
        assert not {"pipeline", "txid"} & set(task.template_fields), task.task_id
    # no logical-date macro in any templated field (spark-submit's own): they are NULL for
    # runs triggered through the API, where only the run id (the txid) is set
    templates = []
    for task in dag.tasks:
        for name in task.template_fields:
            templates.append(json.dumps(getattr(task, name, None), default=str))
    assert templates  # spark-submit's fields are there to look at
    dated = ("{{ ds", "logical_date", "data_interval", "{{ ts", "execution_date")
    assert [t for t in templates if any(d in t for d in dated)] == []
    # a lake pipeline with maintain_every maintains its table after commit
    lake = bag.dags["onceflow_inventory_lake"]
    assert [t.task_id for t in lake.topological_sort()] == ["plan", "process", "commit", "maintain"]
    assert isinstance(lake.get_task("maintain"), TxidOperator)


def test_bad_pipeline_file_becomes_an_import_error(tmp_path, monkeypatch):
    bad = tmp_path / "pipelines.toml"
    bad.write_text(
        '[pipelines.x]\ntopics = ["ok"]\ntransform = "m:f"\nsink = { table = "t" }\n'
        'sink_schema = "a; drop table b"\n'
    )
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    monkeypatch.setenv("ONCEFLOW_PIPELINES", str(bad))
    from conftest import DagBag

    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert len(bag.import_errors) == 1
    assert "sink_schema" in next(iter(bag.import_errors.values()))
    assert os.environ["ONCEFLOW_PIPELINES"] == str(bad)


def test_the_users_folders_reach_the_spark_driver_and_its_executors(tmp_path, monkeypatch):
    """ONCEFLOW_PYTHONPATH is passed to spark-submit (the driver imports the transform from
    it) and put on the executors' PYTHONPATH (their Python workers unpickle its UDFs)."""
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    monkeypatch.setenv("ONCEFLOW_PYTHONPATH", f"{tmp_path}/acme:{tmp_path}/more")
    monkeypatch.delenv("ONCEFLOW_SPARK_JOBS", raising=False)
    from onceflow.airflow.dag_factory import build_dags
    from onceflow.airflow.worker_env import process_conf, process_env

    dag = build_dags(ROOT / "dags" / "pipelines.toml")["onceflow_orders"]
    process = dag.get_task("process")
    dags = str(ROOT / "dags")  # the pipelines file's folder comes last
    # what the task hands spark-submit on its worker
    env = process_env(process.pipelines_path())
    conf = process_conf(process.pipeline_config(), process.pipelines_path())
    assert env["ONCEFLOW_PYTHONPATH"] == f"{tmp_path}/acme:{tmp_path}/more:{dags}"
    executor_path = conf["spark.executorEnv.PYTHONPATH"].split(":")
    # no checkout folder: onceflow itself comes from the installed package
    assert executor_path == [str(ROOT / "spark_jobs"), f"{tmp_path}/acme", f"{tmp_path}/more", dags]


def test_the_dag_keeps_nothing_of_the_host_that_parsed_it(tmp_path, monkeypatch):
    """A DAG processor on another host than the workers: its Python, JAVA_HOME, PATH and
    driver class archive are in no task; the process task takes the worker's when it runs."""
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    host = tmp_path / "parser-host"
    archive = host / "driver.jsa"
    host.mkdir()
    archive.write_bytes(b"an archive")
    monkeypatch.setenv("ONCEFLOW_SPARK_ARCHIVE", str(archive))
    monkeypatch.setenv("JAVA_HOME", str(host / "java"))
    monkeypatch.setenv("PATH", f"{host / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("ONCEFLOW_SPARK_PYTHON", str(host / "python"))
    from onceflow.airflow.dag_factory import build_dags
    from onceflow.airflow.worker_env import process_conf, process_env

    dags = build_dags(ROOT / "dags" / "pipelines.toml")
    held = json.dumps([vars(task) for dag in dags.values() for task in dag.tasks], default=str)
    assert str(host) not in held and sys.executable not in held
    # on the worker (here: the same environment), when the task runs
    process = dags["onceflow_orders"].get_task("process")
    conf = process_conf(process.pipeline_config(), process.pipelines_path())
    assert conf["spark.pyspark.python"] == conf["spark.pyspark.driver.python"] == f"{host}/python"
    assert f"-XX:SharedArchiveFile={archive}" in conf["spark.driver.extraJavaOptions"]
    assert process_env(process.pipelines_path())["JAVA_HOME"] == str(host / "java")


def test_a_users_two_line_dag_file_finds_its_pipelines_and_transforms_next_to_it(
    tmp_path, monkeypatch
):
    """The DAG file a user writes: pipelines.toml and the transform package beside it, no
    ONCEFLOW_* variable; the tasks and the job are pointed at that file and folder."""
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "home"))
    for name in ("ONCEFLOW_PIPELINES", "ONCEFLOW_SPARK_JOBS", "ONCEFLOW_PYTHONPATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # no spark_jobs folder here either
    bundle = tmp_path / "bundle"
    (bundle / "acme_flows").mkdir(parents=True)
    (bundle / "acme_flows" / "__init__.py").write_text("")
    (bundle / "acme_flows" / "clicks.py").write_text("def transform(df):\n    return df\n")
    (bundle / "pipelines.toml").write_text(
        '[pipelines.clicks]\ntopics = ["clicks"]\ntransform = "acme_flows.clicks:transform"\n'
        '[pipelines.clicks.sink]\ntable = "clicks"\n'
    )
    (bundle / "flows.py").write_text(
        "from onceflow.airflow import pipelines_dags\n\nglobals().update(pipelines_dags(__file__))\n"
    )
    from conftest import DagBag

    monkeypatch.setenv("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    bag = DagBag(dag_folder=str(bundle))
    assert bag.import_errors == {}
    dag = bag.dags["onceflow_clicks"]
    assert dag.get_task("plan").pipelines_file == str(bundle / "pipelines.toml")
    assert dag.get_task("commit").pipelines_file == str(bundle / "pipelines.toml")
    process = dag.get_task("process")
    from onceflow.airflow.worker_env import process_conf, process_env

    env = process_env(process.pipelines_path())
    assert env["ONCEFLOW_PIPELINES"] == str(bundle / "pipelines.toml")
    assert str(bundle) in env["ONCEFLOW_PYTHONPATH"].split(":")
    conf = process_conf(process.pipeline_config(), process.pipelines_path())
    assert conf["spark.executorEnv.PYTHONPATH"].split(":")[-1] == str(bundle)


def test_a_connect_pipelines_process_task_runs_the_attempt_itself(tmp_path, monkeypatch):
    """process_mode = "connect": no spark-submit; the task runs the attempt on the server of
    its spark_connect connection, with the same folders of the user's code."""
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    monkeypatch.delenv("ONCEFLOW_PYTHONPATH", raising=False)
    pipelines = tmp_path / "pipelines.toml"
    pipelines.write_text(
        '[pipelines.fast]\ntopics = ["t"]\ntransform = "orders:transform"\n'
        'process_mode = "connect"\nsink = { table = "orders" }\n'
        '[pipelines.slow]\ntopics = ["t"]\ntransform = "orders:transform"\n'
        'sink = { table = "orders" }\n'
    )
    monkeypatch.setenv("ONCEFLOW_SPARK_JOBS", str(ROOT / "spark_jobs"))
    from onceflow.airflow.dag_factory import build_dags
    from onceflow.airflow.tasks import ConnectProcessOperator, ProcessOperator

    dags = build_dags(pipelines)
    process = dags["onceflow_fast"].get_task("process")
    assert type(process) is ConnectProcessOperator
    assert process.template_fields == ()  # the txid: the run id, read when it runs
    assert not dags["onceflow_fast"].get_task("plan").do_xcom_push  # nobody reads it
    from onceflow.airflow.worker_env import process_env

    assert process_env(process.pipelines_path())["ONCEFLOW_SPARK_JOBS"] == str(ROOT / "spark_jobs")
    assert process.retries == 2
    assert type(dags["onceflow_slow"].get_task("process")) is ProcessOperator


def test_a_killed_connect_process_task_interrupts_its_job_on_the_server():
    """on_kill: the attempt's sessions are told to interrupt their jobs (before any attempt
    ran, there is nothing to interrupt). The interrupt itself: test_connect_session.py."""
    from onceflow.airflow.tasks import ConnectProcessOperator

    task = ConnectProcessOperator(task_id="process", pipeline="p")
    task.on_kill()  # no attempt yet: nothing happens

    class Source:
        interrupted = 0

        def interrupt(self) -> int:
            self.interrupted += 1
            return 1

    task._source = Source()
    task.on_kill()
    assert task._source.interrupted == 1


def test_a_task_process_builds_only_its_own_pipelines_dags(tmp_path, monkeypatch):
    """Airflow's parsing context names the DAG a task process parses the file for: only
    that pipeline's DAGs are built (its alerts DAG with it); the DAG processor, and a
    context naming a DAG this file lacks, get them all."""
    pipelines = tmp_path / "pipelines.toml"
    pipelines.write_text(
        "".join(
            f'[pipelines.{n}]\ntopics = ["{n}"]\ntransform = "orders:transform"\n'
            'sink = { table = "orders" }\n'
            + ('alert_lag_records = 5\nalert_notifier = "mine:notifier"\n' if n == "b" else "")
            for n in ("a", "b", "c")
        )
    )
    monkeypatch.setenv("ONCEFLOW_SPARK_JOBS", str(ROOT / "spark_jobs"))
    from airflow.sdk.definitions.context import _AIRFLOW_PARSING_CONTEXT_DAG_ID as CONTEXT
    from onceflow.airflow.dag_factory import build_dags

    monkeypatch.delenv(CONTEXT, raising=False)
    everything = {"onceflow_a", "onceflow_b", "onceflow_b_alerts", "onceflow_c"}
    assert set(build_dags(pipelines)) == everything
    monkeypatch.setenv(CONTEXT, "onceflow_c")
    assert set(build_dags(pipelines)) == {"onceflow_c"}
    monkeypatch.setenv(CONTEXT, "onceflow_b_alerts")
    assert set(build_dags(pipelines)) == {"onceflow_b", "onceflow_b_alerts"}
    monkeypatch.setenv(CONTEXT, "someone_elses")
    assert set(build_dags(pipelines)) == everything


def test_a_task_process_leaves_the_transforms_function_to_its_process_step(tmp_path, monkeypatch):
    """The DAG processor refuses a transform whose module lacks the function (read from its
    source); a task process, whose process step imports the module and names a missing
    function itself, builds its DAG without reading the source."""
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "mine.py").write_text("def transform(df):\n    return df\n")
    monkeypatch.setenv("ONCEFLOW_SPARK_JOBS", str(jobs))
    pipelines = tmp_path / "pipelines.toml"
    pipelines.write_text(
        '[pipelines.a]\ntopics = ["a"]\ntransform = "mine:transfrom"\nsink = { table = "t" }\n'
    )
    from airflow.sdk.definitions.context import _AIRFLOW_PARSING_CONTEXT_DAG_ID as CONTEXT
    from onceflow.airflow.dag_factory import build_dags
    from onceflow.errors import ConfigError

    monkeypatch.delenv(CONTEXT, raising=False)
    with pytest.raises(ConfigError, match="defines no 'transfrom'; it defines transform"):
        build_dags(pipelines)
    monkeypatch.setenv(CONTEXT, "onceflow_a")
    assert set(build_dags(pipelines)) == {"onceflow_a"}
