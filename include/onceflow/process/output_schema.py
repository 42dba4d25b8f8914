"""The transform's output schema, remembered by its Spark Connect session.

A stage job needs the schema of the transform's output before it runs: the sink's tables
are fitted to it, and the staged frame carries it (onceflow.process.staged_output). Asking a
Spark Connect frame for it is a round trip in which the server analyses the transform's
whole plan, which the job's own execution then analyses again: 0.06-0.09 s of a 1,000-record
batch of the orders transform, and a share of the server's CPU on every batch
(bench/NOTES.md, 2026-12-06).

So the first batch of a session asks, and the session keeps the answer as one of its own
settings (`spark.onceflow.output.<key>`); later batches read it back in a configuration
round trip, which analyses nothing. The session is the pipeline's for the code it ships
(onceflow.process.connect_session: a changed transform module gets a new session), it
forgets what it remembered when its settings change (`forget_all`), and the key holds the
transform and the schema of its input (the reader's, or a registry format's decoded one).

What a transform gives can still change while its code does not (a schema that follows the
data, a table it joins). A job on a remembered schema therefore checks it where the output
is computed (`changed`: Spark's `typeof(struct(*))` of the output against that of the
remembered names and types, a constant the optimizer folds), and the staged frame raises
CHANGED on every row when they differ: the job fails before any row of the transform's
output is staged. A remembered column the output lost fails the job's analysis. A job on a
remembered schema that fails either way, or fails the transform's or the sink's checks (a
fast form's rows that do not fit the remembered columns look like the fast form's fault),
ends its attempt with OutputSchemaChangedError: retried, and the retry asks the server
(after CHANGED the session asks on every batch). Any other failure forgets the schema too,
so the next batch asks again.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from onceflow.config.pipeline import PipelineConfig
from onceflow.errors import (
    OutputSchemaChangedError,
    SinkSchemaError,
    TransformError,
    TransformRaisedError,
)

log = logging.getLogger("onceflow.process")

PREFIX = "spark.onceflow.output."
# the value under a key whose output changed while its code did not: asked on every batch
ASK = "ask"
CHANGED = "onceflow: the transform's output is not the schema its session remembered"
# the types a remembered schema may hold: the check casts a null to each, which these take
_ATOMIC = {
    "string",
    "binary",
    "boolean",
    "byte",
    "short",
    "integer",
    "long",
    "float",
    "double",
    "decimal",
    "date",
    "timestamp",
    "timestamp_ntz",
    "variant",
}


@dataclass(frozen=True)
class OutputSchema:
    """The schema (a StructType) of a transform's output frame; `remembered`: read back from
    the session rather than asked (the job checks it: `changed`); `key`: where the session
    keeps it (None: not a Spark Connect session, nothing is kept)."""

    schema: Any
    remembered: bool = False
    key: str | None = None

    @property
    def columns(self) -> list[str]:
        return list(self.schema.names)

    def changed(self) -> Any:
        """A boolean Column, over the output frame: its names and types differ from this
        schema's. Constant (typeof is folded), so it costs the job nothing."""
        from pyspark.sql import functions as F

        kept = F.struct(*[F.lit(None).cast(f.dataType).alias(f.name) for f in self.schema.fields])
        return _type_of(F.struct("*")) != _type_of(kept)

    @contextmanager
    def checked(self, spark: Any, transform: str) -> Iterator[None]:
        """Around the stage job's run: a failure of a job on a remembered schema forgets it,
        and one the schema may have caused ends the attempt as OutputSchemaChangedError."""
        try:
            yield
        except Exception as e:
            if not self.remembered or self.key is None:
                raise
            from pyspark.errors import AnalysisException

            changed = CHANGED in str(e)
            _forget(spark, self.key, ask_always=changed)
            fits = isinstance(e, AnalysisException | TransformError | SinkSchemaError)
            if changed or (fits and not isinstance(e, TransformRaisedError)):
                raise OutputSchemaChangedError(transform, self.columns, str(e)) from e
            raise


def _type_of(column: Any) -> Any:
    """Spark's name of the column's type, the default collation's name left out: a string
    the client casts to (a StringType over Spark Connect) has it spelled out, one the
    server's functions make does not, and a schema tells them apart in neither."""
    from pyspark.sql import functions as F

    return F.regexp_replace(F.typeof(column), " collate UTF8_BINARY", "")


def output_schema(spark: Any, out: Any, cfg: PipelineConfig, input_schema: str) -> OutputSchema:
    """The schema of `out`, the output of `cfg`'s transform over a frame of `input_schema`
    (a DDL string): remembered by the Spark Connect session `spark` when it holds one, else
    asked (and kept, unless the session asks on every batch)."""
    if not type(spark).__module__.startswith("pyspark.sql.connect"):  # analysed right here
        return OutputSchema(out.schema)
    from pyspark.sql.types import StructType

    key = PREFIX + key_of(cfg, input_schema)
    kept = spark.conf.get(key, None)
    if kept is not None and kept != ASK:
        return OutputSchema(StructType.fromJson(json.loads(kept)), remembered=True, key=key)
    schema = out.schema
    if kept is None and rememberable(schema):
        spark.conf.set(key, schema.json())
    return OutputSchema(schema, key=key)


def key_of(cfg: PipelineConfig, input_schema: str) -> str:
    """The key of a transform's output within its session: the transform, whether it
    aggregates, and its input's schema."""
    what = json.dumps([cfg.transform or "", cfg.aggregating, input_schema])
    return hashlib.sha256(what.encode()).hexdigest()[:32]


def rememberable(schema: Any) -> bool:
    """Whether `changed` can check `schema`: every type, nested ones too, is one of _ATOMIC
    (char and varchar, intervals and user-defined types are asked for on every batch)."""
    return all(_plain(f.dataType.jsonValue()) for f in schema.fields)


def _plain(t: Any) -> bool:
    if isinstance(t, str):
        return t.split("(")[0] in _ATOMIC
    kind = t.get("type")
    if kind == "array":
        return _plain(t["elementType"])
    if kind == "map":
        return _plain(t["keyType"]) and _plain(t["valueType"])
    if kind == "struct":
        return all(_plain(f["type"]) for f in t["fields"])
    return False


def forget_all(spark: Any) -> None:
    """Forget every output schema the session remembers (its settings change)."""
    for key in [k for k in spark.conf.getAll if k.startswith(PREFIX)]:
        spark.conf.unset(key)


def _forget(spark: Any, key: str, ask_always: bool) -> None:
    try:
        if ask_always:
            spark.conf.set(key, ASK)
        else:
            spark.conf.unset(key)
    except Exception as e:  # noqa: BLE001 - the server may be gone; the job's error stands
        log.warning("could not forget the remembered output schema: %s", e)
