"""The forms a pipeline definition's names must take before they become a DAG id, a SQL
identifier, a Kafka topic or an Airflow connection id: strict, so that each is safe where it
goes (and SQL still quotes them). Each is checked with `fullmatch`: `re.match` with `$`
would also take the name with a trailing newline. A txid's form is the ledger's
(onceflow.ledger.txids)."""

from __future__ import annotations

import re

# a pipeline, schema, table, namespace or column name (at most 40: a DAG id, a SQL schema)
NAME_RE = re.compile(r"[a-z][a-z0-9_]{0,39}")
TOPIC_RE = re.compile(r"[A-Za-z0-9._-]{1,249}")
# A Kafka cluster's bootstrap servers: host:port[,host:port...]
BOOTSTRAP_RE = re.compile(r"[A-Za-z0-9_.\[\]:-]+:[0-9]+(,[A-Za-z0-9_.\[\]:-]+:[0-9]+)*")
# An Airflow connection id (Airflow allows more; these are the ones that need no quoting)
CONN_ID_RE = re.compile(r"[A-Za-z0-9_.-]{1,250}")
# A user's function "module:function" (a transform, an alert notifier): module dotted,
# importable from the spark_jobs folder, the folders of ONCEFLOW_PYTHONPATH or any installed
# package (config.transform_path; onceflow.transforms.load_module imports it).
FUNCTION_REF_RE = re.compile(
    r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*"
)
