"""What a pipeline's lineage names its datasets, without credentials (OpenLineage events are
published to whoever collects them)."""

import pytest

# onceflow.airflow.lineage is the `openlineage` extra's: an install without it (the
# compatibility matrix's cells) has nothing here to test
pytest.importorskip("openlineage", reason="the openlineage extra is not installed")

from onceflow.airflow.lineage import (  # noqa: E402
    kafka_namespace,
    location_dataset,
    postgres_dataset,
)
from onceflow.ledger.db import Ledger  # noqa: E402

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("location", "expected"),
    [
        ("s3://lake/warehouse/stock", ("s3://lake", "warehouse/stock")),
        ("s3://AKIA:s3cr3t@lake/warehouse/stock", ("s3://lake", "warehouse/stock")),
        (
            "abfss://user:p%40ss@acct.dfs.core.windows.net/t",
            ("abfss://acct.dfs.core.windows.net", "t"),
        ),
        ("file:///srv/lake/stock", ("file", "/srv/lake/stock")),
        ("/srv/lake/stock", ("file", "/srv/lake/stock")),
    ],
)
def test_a_lake_tables_dataset_keeps_no_credentials(location, expected):
    """Issue 49, finding 10: a user and password written into a table's location would have
    gone into the namespace."""
    assert location_dataset(location) == expected


def test_a_postgresql_and_a_kafka_dataset_keep_no_credentials():
    namespace, name = postgres_dataset(
        Ledger("postgresql://flow:s3cr3t@db.internal:6432/ledger"), "public", "orders"
    )
    assert (namespace, name) == ("postgres://db.internal:6432", "ledger.public.orders")
    assert kafka_namespace("k1:9093, k2:9093") == "kafka://k1:9093"
