"""Click events, JSON `{"user": "u1", "page": "/docs/intro", "ms": 1200}`: one row per click
with the page's site section. A record that is not such a click is a dead letter."""

from __future__ import annotations

from pyspark.sql import functions as F

CLICK = "user string, page string, ms bigint"


def section(page: str | None) -> str | None:
    """The page's first path segment ("home" for "/"). A plain Python function used as a UDF:
    the executors' Python workers import this module to run it."""
    if page is None:
        return None
    return page.strip("/").split("/")[0] or "home"


def transform(df):
    click = F.from_json(F.col("value").cast("string"), CLICK)
    return df.select(
        "topic",
        "partition",
        "offset",
        "key",
        "value",
        click["user"].alias("user_id"),
        click["page"].alias("page"),
        F.udf(section, "string")(click["page"]).alias("section"),
        click["ms"].alias("dwell_ms"),
        F.when(
            click["user"].isNull() | click["page"].isNull(),
            F.lit("not a click: needs user and page"),
        ).alias("error"),
    )
