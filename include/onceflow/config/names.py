"""The forms a pipeline definition's names, and a txid, must take before they become a DAG id,
a SQL identifier, a Kafka topic, an Airflow connection id or a ledger's key: strict, so that
each is safe where it goes (and SQL still quotes them). Each is checked with `fullmatch`:
`re.match` with `$` would also take the name with a trailing newline."""

from __future__ import annotations

import re

# a pipeline, schema, table, namespace or column name (at most 40: a DAG id, a SQL schema)
NAME_RE = re.compile(r"[a-z][a-z0-9_]{0,39}")
TOPIC_RE = re.compile(r"[A-Za-z0-9._-]{1,249}")
# An Airflow connection id (Airflow allows more; these are the ones that need no quoting)
CONN_ID_RE = re.compile(r"[A-Za-z0-9_.-]{1,250}")
# A user's function "module:function" (a transform, an alert notifier): module dotted,
# importable from the spark_jobs folder, the folders of ONCEFLOW_PYTHONPATH or any installed
# package (settings.transform_path; onceflow.transforms.load_module imports it).
FUNCTION_REF_RE = re.compile(
    r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*"
)
# A txid is its DAG run's run id: the form Airflow's REST API documents for one, at most 250
# characters (its column's length). Plan refuses any other before the ledger changes, so a run
# id Airflow let through (a trailing newline) cannot leave a batch that never runs.
TXID_RE = re.compile(r"[A-Za-z0-9_.~:+-]{1,250}")


def txid_problem(txid: object) -> str | None:
    """Why `txid` is not a txid (TXID_RE), in a sentence naming the rule; None when it is."""
    if not isinstance(txid, str) or not txid:
        return "a txid is a non-empty run id"
    if len(txid) > 250:
        return f"run id {txid[:40]!r}... is {len(txid)} characters long; at most 250"
    if not TXID_RE.fullmatch(txid):
        bad = "".join(sorted({c for c in txid if not TXID_RE.fullmatch(c)}))
        return (
            f"run id {txid!r} holds {bad!r}, which a txid may not: only letters, digits and "
            "_ . ~ : + - (Airflow's run id form)"
        )
    return None
