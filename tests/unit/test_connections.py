"""Where a pipeline's services come from: Airflow connections (read through Airflow's own
lookup, here its environment-variable secrets backend, AIRFLOW_CONN_*), the per-pipeline
ids of pipelines.toml, and the ONCEFLOW_* fallback for the default ids."""

import json
from importlib import metadata

import pytest
from onceflow.config.pipeline_table import parse_pipeline
from onceflow.errors import ConfigError
from onceflow.hooks.kafka import sink_cluster
from onceflow.hooks.services import services

pytestmark = pytest.mark.unit

SECRET = "s3cr3t-Pa55word"


@pytest.fixture(autouse=True)
def _airflow_home(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    monkeypatch.setenv("ONCEFLOW_POSTGRES_DSN", "postgresql://env:env@127.0.0.1:1/envdb")
    monkeypatch.setenv("ONCEFLOW_KAFKA_BOOTSTRAP", "127.0.0.1:2")
    monkeypatch.delenv("ONCEFLOW_KAFKA_CONFIG", raising=False)
    for name in ("ONCEFLOW_LEDGER", "ONCEFLOW_KAFKA", "PROD_PG", "PROD_KAFKA", "SINK_KAFKA"):
        monkeypatch.delenv(f"AIRFLOW_CONN_{name}", raising=False)


def _conn(monkeypatch, conn_id: str, **fields) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(fields))


def _cfg(**keys):
    raw = {"topics": ["t"], "transform": "m:f", "sink": {"table": "x"}, **keys}
    return parse_pipeline("p", raw, "/etc/flows/pipelines.toml")


def test_without_connections_the_environment_is_used():
    svc = services(_cfg())
    assert svc.ledger.libpq_dsn() == "postgresql://env:env@127.0.0.1:1/envdb"
    assert svc.ledger.source == "ONCEFLOW_POSTGRES_DSN"
    assert svc.kafka.bootstrap == "127.0.0.1:2"


def test_the_default_connections_win_over_the_environment(monkeypatch):
    _conn(monkeypatch, "onceflow_ledger", conn_type="postgres", host="db.internal", port=6432,
          login="flow", password=SECRET, schema="ledger", extra={"sslmode": "verify-full"})  # fmt: skip
    _conn(monkeypatch, "onceflow_kafka", conn_type="kafka", extra={
        "bootstrap.servers": "k1:9093,k2:9093", "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "flow", "sasl.password": SECRET,
        "group.id": "the-providers-hooks-need-one"})  # fmt: skip
    svc = services(_cfg())
    from psycopg2.extensions import parse_dsn

    assert parse_dsn(svc.ledger.libpq_dsn()) == {
        "host": "db.internal", "port": "6432", "user": "flow", "password": SECRET,
        "dbname": "ledger", "sslmode": "verify-full"}  # fmt: skip
    assert svc.ledger.source == "Airflow connection 'onceflow_ledger'"
    # the Ledger names its database, never the DSN
    assert (
        str(svc.ledger) == "flow@db.internal:6432/ledger from Airflow connection 'onceflow_ledger'"
    )
    assert svc.kafka.bootstrap == "k1:9093,k2:9093"
    assert dict(svc.kafka.security)["sasl.password"] == SECRET
    assert "onceflow_kafka" in svc.kafka.describe()
    assert SECRET not in repr(svc) and SECRET not in svc.kafka.describe()
    assert SECRET not in repr(svc.ledger) and SECRET not in str(svc.ledger)


def test_a_pipeline_names_its_own_connections(monkeypatch):
    _conn(monkeypatch, "prod_pg", conn_type="postgres", host="pg", login="u", password="p")
    _conn(monkeypatch, "prod_kafka", conn_type="kafka", extra={"bootstrap.servers": "pk:9092"})
    svc = services(_cfg(ledger_conn_id="prod_pg", kafka_conn_id="prod_kafka"))
    assert "host=pg" in svc.ledger.libpq_dsn() and svc.kafka.bootstrap == "pk:9092"


def test_a_named_connection_that_does_not_exist_names_itself_and_where():
    with pytest.raises(ConfigError) as e:
        services(_cfg(kafka_conn_id="prod_kafka"))
    assert "Airflow connection 'prod_kafka' (type 'kafka') does not exist" in str(e.value)
    assert "/etc/flows/pipelines.toml: `kafka_conn_id`" in str(e.value)
    with pytest.raises(
        ConfigError, match=r"'prod_pg' \(type 'postgres'\) does not exist .*`ledger_conn_id`"
    ):
        services(_cfg(ledger_conn_id="prod_pg"))


@pytest.mark.skipif(
    tuple(int(x) for x in metadata.version("apache-airflow").split(".")[:2]) < (3, 2),
    reason="Airflow 3.1 reads such a connection as not defined, outside a task too: Onceflow "
    "cannot tell it from a missing one there",
)
def test_an_extra_that_is_not_json_says_so(monkeypatch):
    _conn(monkeypatch, "onceflow_kafka", conn_type="kafka", extra='{"bootstrap.servers": k1:9092}')
    with pytest.raises(ConfigError, match="'onceflow_kafka': its extra is not valid JSON"):
        services(_cfg())


def test_an_unknown_client_key_is_named(monkeypatch):
    _conn(monkeypatch, "onceflow_kafka", conn_type="kafka",
          extra={"bootstrap.servers": "k:1", "sasl.mechanisms": "PLAIN", "sasl.usernme": "x"})  # fmt: skip
    with pytest.raises(ConfigError, match="'sasl.usernme'") as e:
        services(_cfg())
    assert "onceflow_kafka" in str(e.value)


def test_an_unknown_libpq_key_and_a_wrong_type_are_named(monkeypatch):
    _conn(monkeypatch, "onceflow_ledger", conn_type="postgres", host="h", extra={"iam": True})
    with pytest.raises(ConfigError, match="extra key 'iam'"):
        services(_cfg())
    _conn(monkeypatch, "onceflow_ledger", conn_type="mysql", host="h")
    with pytest.raises(ConfigError, match="of type 'mysql'; the ledger needs a 'postgres'"):
        services(_cfg())


def test_a_kafka_sinks_cluster(monkeypatch):
    _conn(monkeypatch, "onceflow_kafka", conn_type="kafka", extra={
        "bootstrap.servers": "src:9093", "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": SECRET})  # fmt: skip
    _conn(monkeypatch, "sink_kafka", conn_type="kafka", extra={"bootstrap.servers": "out:9092"})
    kafka = {"kind": "kafka", "topic": "out"}
    assert sink_cluster(_cfg(sink=kafka)).bootstrap == "src:9093"  # the source cluster
    other = sink_cluster(_cfg(sink={**kafka, "bootstrap": "b:9092"}))
    assert other.bootstrap == "b:9092" and dict(other.security)["sasl.password"] == SECRET
    assert sink_cluster(_cfg(sink={**kafka, "conn_id": "sink_kafka"})).security == (
        ("security.protocol", "PLAINTEXT"),
    )
    with pytest.raises(
        ConfigError, match=r"'nope' \(type 'kafka'\) does not exist .*`sink.conn_id`"
    ):
        sink_cluster(_cfg(sink={**kafka, "conn_id": "nope"}))
    with pytest.raises(ConfigError, match="not both"):
        _cfg(sink={**kafka, "conn_id": "sink_kafka", "bootstrap": "b:9092"})


def test_the_command_line_reads_named_connections(monkeypatch):
    """`onceflow --ledger-conn ID --kafka-conn ID ...`: the command's ONCEFLOW_* settings (and
    so every client it makes) come from those connections."""
    from onceflow.cli.selection import use_connections
    from onceflow.kafka.client import cluster_from_env
    from onceflow.settings import Settings

    _conn(monkeypatch, "prod_pg", conn_type="postgres", host="pg", login="u", password=SECRET)
    _conn(monkeypatch, "prod_kafka", conn_type="kafka", extra={
        "bootstrap.servers": "pk:9093", "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": SECRET})  # fmt: skip
    for name in ("ONCEFLOW_POSTGRES_DSN", "ONCEFLOW_KAFKA_BOOTSTRAP", "ONCEFLOW_KAFKA_CONFIG"):
        monkeypatch.setenv(name, "")  # restored after the test
    use_connections("prod_pg", "prod_kafka")
    settings = Settings.from_env()
    assert "host=pg" in settings.ledger.libpq_dsn() and SECRET not in repr(settings)
    cluster = cluster_from_env(settings.kafka_bootstrap)
    assert cluster.bootstrap == "pk:9093" and dict(cluster.security)["sasl.password"] == SECRET
    with pytest.raises(
        ConfigError, match=r"'nope' \(type 'kafka'\) does not exist \(--kafka-conn names it\)"
    ):
        use_connections(None, "nope")


def test_a_kafka_sink_reads_its_connection_only_when_it_publishes(monkeypatch):
    """The process job stages a Kafka sink's output into PostgreSQL outside Airflow, where the
    sink's connection cannot be read: building the sink must not ask for it."""
    from onceflow.hooks.sink import sink_for

    sink = sink_for(_cfg(sink={"kind": "kafka", "topic": "out", "conn_id": "nope"}))
    assert sink.describe() == "the Kafka topic 'out' on the cluster of Airflow connection 'nope'"
    with pytest.raises(ConfigError, match=r"'nope' \(type 'kafka'\) does not exist"):
        assert sink.bootstrap


def test_without_a_connection_or_its_variable_the_error_names_the_connection(monkeypatch):
    """No silent fallback: the runtime knows no default address (issue 48)."""
    monkeypatch.delenv("ONCEFLOW_POSTGRES_DSN")
    with pytest.raises(ConfigError) as e:
        services(_cfg())
    assert "Airflow connection 'onceflow_ledger' (type 'postgres') does not exist" in str(e.value)
    assert "airflow connections add onceflow_ledger --conn-type postgres" in str(e.value)
    assert "ONCEFLOW_POSTGRES_DSN" in str(e.value)
    monkeypatch.setenv("ONCEFLOW_POSTGRES_DSN", "postgresql://env:env@127.0.0.1:1/envdb")
    monkeypatch.delenv("ONCEFLOW_KAFKA_BOOTSTRAP")
    with pytest.raises(ConfigError) as e:
        services(_cfg())
    assert "Airflow connection 'onceflow_kafka' (type 'kafka') does not exist" in str(e.value)
    assert "airflow connections add onceflow_kafka --conn-type kafka" in str(e.value)


def test_the_command_line_without_a_ledger_names_both_ways_to_give_one(monkeypatch, capsys):
    from onceflow.cli.main import main

    monkeypatch.delenv("ONCEFLOW_POSTGRES_DSN")
    assert main(["migrate"]) == 2
    err = capsys.readouterr().err
    assert "onceflow migrate: no ledger database: set ONCEFLOW_POSTGRES_DSN" in err
    assert "--ledger-conn onceflow_ledger" in err


def test_the_runtime_holds_neither_the_stacks_address_nor_its_login():
    """The embedded stack's ports and logins are onceflow_dev's: a wheel that knew them would
    reach for a stack a user never started."""
    from pathlib import Path

    import onceflow
    import onceflow_dev.settings as stack

    package = Path(onceflow.__file__).parent
    found = [
        f"{path.relative_to(package)}: {word}"
        for path in sorted(package.rglob("*.py"))
        for word in (
            "25432",
            "29092",
            "28080",
            f"{stack.PG_USER}:{stack.LEGACY_PG_PASSWORD}@",
            f'"{stack.AIRFLOW_USER}"',
        )  # fmt: skip
        if word in path.read_text()
    ]
    assert found == []
