"""A registry format's keys in the pipelines file, and the registry's Airflow connection
(onceflow.config.record_format, onceflow.hooks.registry): each refusal names the key."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from onceflow.config.pipeline_table import parse_pipeline
from onceflow.errors import ConfigError, PipelineKeyError
from onceflow.hooks import registry as hook

pytestmark = pytest.mark.unit
SINK = {"sink": {"table": "payments"}}


def test_an_avro_pipeline_needs_no_transform_and_reads_its_topics_value_subject():
    cfg = parse_pipeline("pay", {"topics": ["payments"], "format": "avro", **SINK})
    assert (cfg.format, cfg.subject, cfg.transform, cfg.reader_schema_version) == (
        "avro",
        "payments-value",
        "",
        None,
    )
    pinned = parse_pipeline(
        "pay",
        {
            "topics": ["a", "b"],
            "format": "avro",
            "subject": "pay",
            "reader_schema_version": 3,
            **SINK,
        },
    )
    assert (pinned.subject, pinned.reader_schema_version) == ("pay", 3)


@pytest.mark.parametrize(
    ("raw", "key", "why"),
    [
        ({"format": "xml"}, "format", "is not one of"),
        ({"format": "avro", "topics": ["a", "b"]}, "subject", "several topics"),
        ({"format": "avro", "reader_schema_version": 0}, "reader_schema_version", "not a version"),
        ({"format": "avro", "subject": ""}, "subject", "not a subject"),
        ({"subject": "x-value", "transform": "orders:transform"}, "subject", "only a registry"),
        (
            {"registry_conn_id": "r", "transform": "orders:transform"},
            "registry_conn_id",
            "only a registry",
        ),
        ({}, "transform", "only a registry format's or an envelope's records land without"),
        ({"key_format": "json", "transform": "orders:transform"}, "key_format", "is not one of"),
        ({"key_subject": "k", "transform": "orders:transform"}, "key_subject", "only a registry"),
        (
            {"key_format": "avro", "transform": "orders:transform", "topics": ["a", "b"]},
            "key_subject",
            "several topics",
        ),
        ({"format": "avro", "transform_kind": "aggregating"}, "transform", "aggregating"),
    ],
)
def test_each_bad_format_key_is_refused_by_name(raw, key, why):
    with pytest.raises(PipelineKeyError, match=why) as e:
        parse_pipeline("pay", {"topics": ["payments"], **SINK, **raw}, "p.toml")
    assert e.value.key == key


def test_keys_in_a_registry_format_read_their_topics_key_subject():
    cfg = parse_pipeline(
        "pay",
        {"topics": ["payments"], "key_format": "avro", "transform": "orders:transform", **SINK},
    )
    assert (cfg.format, cfg.key_format, cfg.key_subject, cfg.subject) == (
        "bytes",
        "avro",
        "payments-key",
        "",
    )
    assert cfg.uses_registry and not cfg.registry_format


def conn(**fields):
    base = {
        "host": None,
        "schema": None,
        "port": None,
        "login": None,
        "password": None,
        "extra": None,
        "conn_type": "schema_registry",
    }
    return SimpleNamespace(**{**base, **fields})


def test_the_registry_connection_gives_url_credentials_and_ca():
    r = hook.registry_from(
        conn(
            host="https://reg.example.com:8081",
            login="key",
            password="secret",
            extra='{"ca_file": "/ca.pem"}',
        ),
        "onceflow_registry",
    )
    assert (r.url, r.user, r.password, r.ca_file, r.token) == (
        "https://reg.example.com:8081",
        "key",
        "secret",
        "/ca.pem",
        None,
    )
    r = hook.registry_from(
        conn(host="reg", schema="https", port=8443, extra='{"bearer_token": "tok"}'), "r"
    )
    assert (r.url, r.token) == ("https://reg:8443", "tok")
    assert (
        "onceflow_registry" in hook.registry_from(conn(host="http://reg"), "onceflow_registry").name
    )
    with pytest.raises(ConfigError, match="'r' has no host"):
        hook.registry_from(conn(), "r")


def test_a_pipeline_without_a_registry_is_told_how_to_give_one(monkeypatch):
    monkeypatch.delenv(hook.REGISTRY_ENV, raising=False)
    monkeypatch.setattr(hook, "lookup", lambda cid, named_by, conn=None, conn_type="": None)
    cfg = parse_pipeline("pay", {"topics": ["payments"], "format": "avro", **SINK}, "p.toml")
    with pytest.raises(ConfigError, match="create the Airflow connection 'onceflow_registry'"):
        hook.pipeline_registry(cfg)
    monkeypatch.setenv(hook.REGISTRY_ENV, "http://127.0.0.1:1")
    assert hook.pipeline_registry(cfg).url == "http://127.0.0.1:1"
    assert (
        hook.reader_schemas_of(
            parse_pipeline("b", {"topics": ["t"], "transform": "orders:transform", **SINK})
        )
        is None
    )
