"""The hooks Airflow knows (onceflow.hooks.provider_hooks): each reads its connection type,
a missing connection is named with its type and the command that creates it, and Airflow's
providers manager finds the schema registry's own connection type with its form fields."""

from __future__ import annotations

import json
from importlib import metadata

import pytest
from onceflow.errors import ConfigError
from onceflow.hooks.provider_hooks import (
    KafkaClusterHook,
    LakeStorageHook,
    LedgerHook,
    SchemaRegistryHook,
)

pytestmark = pytest.mark.unit

SECRET = "hook-Pa55word-9"
AIRFLOW = tuple(int(x) for x in metadata.version("apache-airflow").split(".")[:2])


@pytest.fixture(autouse=True)
def _airflow_home(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    for name in ("ONCEFLOW_LEDGER", "ONCEFLOW_KAFKA", "ONCEFLOW_REGISTRY", "LAKE"):
        monkeypatch.delenv(f"AIRFLOW_CONN_{name}", raising=False)


def _conn(monkeypatch, conn_id: str, **fields) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(fields))


def test_each_hook_reads_its_own_connection(monkeypatch):
    _conn(monkeypatch, "onceflow_ledger", conn_type="postgres", host="db.internal", port=6432,
          login="flow", password=SECRET, schema="ledger")  # fmt: skip
    _conn(monkeypatch, "onceflow_kafka", conn_type="kafka",
          extra={"bootstrap.servers": "k1:9093", "security.protocol": "SSL"})  # fmt: skip
    _conn(monkeypatch, "onceflow_registry", conn_type="schema_registry",
          host="https://registry.internal:8081", extra={"bearer_token": SECRET})  # fmt: skip
    _conn(monkeypatch, "lake", conn_type="aws", login="AKID", password=SECRET,
          extra={"endpoint_url": "http://127.0.0.1:9000", "region_name": "eu-west-1"})  # fmt: skip

    dsn = LedgerHook().dsn()
    assert "host=db.internal" in dsn and "port=6432" in dsn and "dbname=ledger" in dsn
    assert KafkaClusterHook().cluster().bootstrap == "k1:9093"
    registry = SchemaRegistryHook().registry()
    assert (registry.url, registry.token) == ("https://registry.internal:8081", SECRET)
    storage = LakeStorageHook("lake").storage()
    assert (storage.endpoint, storage.region, storage.access_key) == (
        "http://127.0.0.1:9000",
        "eu-west-1",
        "AKID",
    )
    assert SECRET not in repr(registry) and SECRET not in repr(storage)


@pytest.mark.parametrize(
    ("hook", "conn_type", "line"),
    [
        (LedgerHook(), "postgres", "--conn-type postgres --conn-host HOST"),
        (KafkaClusterHook(), "kafka", '--conn-extra \'{"bootstrap.servers": "HOST:9092"}\''),
        (SchemaRegistryHook(), "schema_registry", "--conn-host https://HOST:8081"),
    ],
    ids=lambda v: v if isinstance(v, str) else type(v).__name__,
)
def test_a_missing_connection_is_named_with_its_type_and_how_to_add_it(hook, conn_type, line):
    call = {"postgres": "dsn", "kafka": "cluster", "schema_registry": "registry"}[conn_type]
    with pytest.raises(ConfigError) as e:
        getattr(hook, call)()
    message = str(e.value)
    conn_id = hook.default_conn_name
    assert f"Airflow connection {conn_id!r} (type {conn_type!r}) does not exist" in message
    assert f"airflow connections add {conn_id} " in message and line in message


def test_a_registry_connection_of_another_type_is_refused(monkeypatch):
    _conn(monkeypatch, "onceflow_registry", conn_type="postgres", host="db")
    with pytest.raises(ConfigError, match="needs a 'schema_registry' connection"):
        SchemaRegistryHook().registry()
    _conn(monkeypatch, "onceflow_registry", conn_type="http", host="http://r:8081")  # 0.1.0's
    assert SchemaRegistryHook().registry().url == "http://r:8081"


def test_airflow_finds_the_schema_registry_type_and_its_form(monkeypatch, tmp_path):
    from airflow.providers_manager import ProvidersManager

    manager = ProvidersManager()
    hook = manager.hooks.get("schema_registry")
    assert hook is not None and hook.hook_class_name.endswith("provider_hooks.SchemaRegistryHook")
    assert hook.hook_name == "Schema Registry (Onceflow)"
    assert hook.connection_id_attribute_name == "registry_conn_id"
    if AIRFLOW < (3, 2):  # 3.1 builds a type's form with Flask-AppBuilder, not from its
        return  # declaration: without it the type is listed, its fields are the plain ones
    fields = set(manager.connection_form_widgets)
    assert {"extra__schema_registry__bearer_token", "extra__schema_registry__ca_file"} <= fields
    behaviour = manager.field_behaviours["schema_registry"]
    assert behaviour["relabeling"]["host"] == "Registry URL"
    assert "port" in behaviour["hidden_fields"]
