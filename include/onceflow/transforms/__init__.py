"""Transforms: the pipelines' functions "module:function" (`load_transform`), PySpark code
in the spark_jobs folder or any importable package.

A transform maps the rows of the reader (topic, partition, offset, key, value, timestamp)
to its sink's stage columns. It must be deterministic: process counts the records read
apart from the transform, and ledger.fencing.mark_staged refuses an attempt whose output does not
account for every one of them (a valid row or a dead letter).

A transform ("module:function", config.names.FUNCTION_REF_RE) is by default a record-wise
function `DataFrame -> DataFrame` over the reader's columns. Its output keeps topic,
partition and offset (one row per input record, no filter, no shuffle, so that each stage
part holds the same records in every attempt: onceflow.staging.fence) and adds the columns its sink publishes;
an `error` string column, when not null, sends the record to dead letters with that
reason; it may keep `key` and `value`, which the stage keeps for dead letters, and whose
`value` being null makes the record a tombstone for an upsert sink. `check_output` states this contract once, before anything is
staged.

An aggregating transform (the pipeline's `transform_kind = "aggregating"`, into a
merge sink) may filter, group and shuffle: its output rows belong to the txid, not to a
record. `check_aggregate_output` states its contract once, before anything is staged: the
sink's key and aggregate columns and `records`, a bigint saying how many source records
each row sums up, so that sum(records) + dead letters = records read (ledger.fencing.mark_staged
checks it); optionally dead-letter rows, whose `error` is not null and which carry the
refused record's topic, partition and offset (and key and value if kept), typically a
unionByName(..., allowMissingColumns=True) of the aggregate rows and the refused records.
A row that breaks it (`aggregate_row_violation`: a dead row without coordinates, an
aggregate row with a null key or `records`) fails its part before the part commits, and the
attempt with it: it is never marked staged, so nothing of it can be published. Its
output partitioning must be a function of the records (a groupBy's is): its output
partitions are the stage's parts (onceflow.staging.fence), which a retried task restages.

A record-wise transform "module:transform" may have a fast form: a function of its module
`fast_form(batch) -> (accepted, rows)` over the reader's Arrow batches (the reader's columns
above, as pyarrow.RecordBatch), run in the reader's Python worker (onceflow.staging.fast_stage):
`accepted` are the indices (int64 numpy, ascending) of the records of `batch` it takes,
`rows` their output as a pyarrow.RecordBatch of the user's columns of `transform`'s output
(all but topic, partition, offset, error, key, value), in the same order, with the Arrow
types Spark gives them (fast_stage.fast_form_columns); the stage adds the coordinates. It
must take only records whose rows it computes exactly as `transform` would (valid ones: a
fast row is never a dead letter); the rest still go through `transform` in the JVM, dead
letters with them. process uses it when the pipeline's `fast_form` is on (the default) and
its sink takes one (Sink.takes_fast_form: a PostgreSQL append table). It runs in every
reader worker, so it should import no more than pyarrow and numpy (pandas costs seconds per
worker). With a fast form, `transform` must run no Spark job over its input while its plan
is built: the workers get their stage target with process's own job (fast_stage.for_job).
spark_jobs/orders.py is an example.

The module is looked up in the spark_jobs folder and the user's folders of
ONCEFLOW_PYTHONPATH first (config.transform_path), then on sys.path (any installed
package); process ships it to executors that may lack it (onceflow.spark.shipping).

A transform's module may also define `sample(i: int, rng: random.Random) ->
(key: bytes | None, value: bytes | None)`, the i-th demo record of its topic, a deterministic
function of i and the state of rng (a value None is a tombstone).
`onceflow-dev produce --pipeline NAME` (onceflow_dev.producer) and the chaos harness produce the
pipeline's test records with it; processing never calls it, so it is optional: without it
a pipeline runs as well, only those two commands refuse it.
spark_jobs/orders.py, spark_jobs/inventory.py and spark_jobs/pageviews.py are examples.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from importlib import import_module
from pathlib import Path
from types import ModuleType
from typing import Any

from onceflow.config.sink import SinkConfig
from onceflow.errors import TransformError

#: columns a record-wise transform's output must keep: the source record's coordinates
COORDINATES = ("topic", "partition", "offset")
#: output columns the stage treats itself (not published as the user's columns)
PASSED_THROUGH = (*COORDINATES, "error", "key", "value")
#: an aggregating transform's column: how many source records an output row sums up
RECORDS = "records"


def load_fast_form(spec: str) -> Callable[[Any], Any] | None:
    """The fast form of a transform "module:transform": its module's `fast_form`, or
    None without one (or when the pipeline's transform is another function of the module:
    a fast form goes with `transform`); TransformError if `fast_form` is not a function."""
    if spec.partition(":")[2] != "transform":
        return None
    module = load_module(spec)
    fn = getattr(module, "fast_form", None)
    if fn is not None and not callable(fn):
        where = getattr(module, "__file__", None) or module.__name__
        raise TransformError(
            f"transform {spec!r}: {module.__name__}.fast_form ({where}) is a "
            f"{type(fn).__name__}, not a function batch -> (accepted indices, rows)"
        )
    return fn


def load_transform(spec: str) -> Callable[[Any], Any]:
    """The pipeline's transform function "module:function" (for "", none: the records as
    they are); raises TransformError saying what is missing and where."""
    if not spec:
        return _as_they_are
    module = load_module(spec)
    function = spec.partition(":")[2]
    where = getattr(module, "__file__", None) or module.__name__
    if not hasattr(module, function):
        raise TransformError(
            f"transform {spec!r}: module {module.__name__!r} ({where}) has no attribute "
            f"{function!r}"
        )
    fn = getattr(module, function)
    if not callable(fn):
        raise TransformError(
            f"transform {spec!r}: {module.__name__}.{function} ({where}) is a "
            f"{type(fn).__name__}, not a function DataFrame -> DataFrame"
        )
    return fn


def _as_they_are(df: Any) -> Any:
    """A pipeline without a transform (a registry format's): its decoded records land."""
    return df


def load_module(spec: str, what: str = "transform") -> ModuleType:
    """The module of a transform "module:function" (or of `what` else: an alert notifier),
    looked up in the spark_jobs folder and the ONCEFLOW_PYTHONPATH folders
    (config.transform_path) first, then on sys.path; raises TransformError naming the
    module and where it was searched."""
    module_name, sep, function = spec.partition(":")
    if not sep or not module_name or not function:
        raise TransformError(f"{what} {spec!r} is not 'module:function'")
    from onceflow.config.transform_path import transform_path

    folders = [str(p) for p in transform_path()]
    jobs, users = folders[0], folders[1:]
    for folder in reversed(folders):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    try:
        return import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name is not None and (module_name == e.name or module_name.startswith(e.name + ".")):
            raise TransformError(
                f"{what} {spec!r}: module {module_name!r} not found; searched the "
                f"spark_jobs folder {jobs} (ONCEFLOW_SPARK_JOBS), "
                f"ONCEFLOW_PYTHONPATH {_described(users) if users else '(not set)'} "
                f"and then sys.path {[p for p in sys.path if p not in folders]}"
            ) from None
        raise TransformError(
            f"{what} {spec!r}: module {module_name!r} imports {e.name!r}, which is not "
            "installed for this Python"
        ) from e


def _described(folders: list[str]) -> list[str]:
    """The folders, each missing one marked: a typo in ONCEFLOW_PYTHONPATH shows at once."""
    return [f if Path(f).is_dir() else f"{f} (no such folder)" for f in folders]


def passed_through(aggregating: bool) -> tuple[str, ...]:
    """The output columns the stage treats itself: an aggregating transform's `records` too."""
    return (*PASSED_THROUGH, RECORDS) if aggregating else PASSED_THROUGH


def user_columns(columns: Iterable[str], aggregating: bool = False) -> tuple[str, ...]:
    """The output columns a sink publishes as the user's: all but the passed-through ones."""
    own = passed_through(aggregating)
    return tuple(c for c in columns if c not in own)


def check_aggregate_output(
    spec: str, pipeline: str, columns: Iterable[str], sink: SinkConfig
) -> None:
    """Refuse an aggregating transform's output that lacks the columns of its contract (the
    sink's key and aggregates, `records`; the coordinates when it has dead letters, i.e. an
    `error` column), naming them, before anything is staged. Per row the contract is
    `aggregate_row_violation`'s."""
    columns = list(columns)
    needed = [*sink.key, *sink.aggregates, RECORDS]
    if "error" in columns:
        needed += COORDINATES
    missing = [c for c in needed if c not in columns]
    if missing:
        raise TransformError(
            f"aggregating transform {spec!r} of pipeline {pipeline!r}: its output lacks "
            f"column(s) {missing}; it must have the sink's key {list(sink.key)}, its "
            f"aggregates {list(sink.aggregates)} and {RECORDS!r} (how many source records "
            "each row sums up), and with an 'error' column (dead letters) topic, partition "
            f"and offset of each refused record. Output columns: {columns}. Nothing was staged."
        )
    _refuse_duplicates(spec, pipeline, columns)


def aggregate_row_violation(
    spec: str, pipeline: str, columns: Iterable[str], sink: SinkConfig
) -> Any:
    """A Spark Column over an aggregating transform's output (of `columns`, which passed
    check_aggregate_output): why the row breaks the contract, NULL when it keeps it. A dead
    row (error not null) needs its record's coordinates, to be a dead letter the audit
    places; an aggregate row needs its key (the state table's primary key) and a `records`
    >= 0."""
    from pyspark.sql import functions as F

    has_error = "error" in list(columns)
    dead = F.col("error").isNotNull() if has_error else F.lit(False)
    rules = [
        (
            dead & F.col(c).isNull(),
            f"a dead-letter row has no {c!r} (a dead row carries topic, partition and offset "
            "of the record it refuses)",
        )
        for c in (COORDINATES if has_error else ())
    ]
    rules += [
        (~dead & F.col(k).isNull(), f"an aggregate row's key column {k!r} is null")
        for k in sink.key
    ]
    rules.append(
        (
            ~dead & (F.col(RECORDS).isNull() | (F.col(RECORDS) < 0)),
            f"an aggregate row's {RECORDS!r} is null or negative (it counts the source "
            "records the row sums up)",
        )
    )
    where = f"aggregating transform {spec!r} of pipeline {pipeline!r}: "
    end = ". The attempt fails: nothing of it can be published."
    violation = F.when(rules[0][0], F.lit(f"{where}{rules[0][1]}{end}"))
    for condition, why in rules[1:]:
        violation = violation.when(condition, F.lit(f"{where}{why}{end}"))
    return violation


def check_output(
    spec: str, pipeline: str, columns: Iterable[str], sink: SinkConfig, decoded: bool = False
) -> None:
    """Refuse an output that does not fit the record-wise contract and the sink, naming the
    missing columns (before anything is staged). A transform of `decoded` records (a
    registry format's) keeps `error` too: it names the records that did not decode, which
    are dead letters."""
    columns = list(columns)
    needed = [*COORDINATES, *sink.key, *sink.order_by, *sink.aggregates]
    needed += ["error"] if decoded else []
    missing = [c for c in needed if c not in columns]
    if missing:
        why = ["topic, partition and offset (a record-wise transform keeps them)"]
        if sink.key:
            why.append(f"the sink's key {list(sink.key)}")
        if sink.order_by:
            why.append(f"its order_by {list(sink.order_by)}")
        if sink.aggregates:
            why.append(f"its aggregates {list(sink.aggregates)}")
        if decoded:
            why.append("error (the records that did not decode: keep the column as it is)")
        raise TransformError(
            f"transform {spec!r} of pipeline {pipeline!r}: its output lacks column(s) "
            f"{missing}; it must have {' and '.join(why)}. Output columns: {columns}. "
            "Nothing was staged."
        )
    _refuse_duplicates(spec, pipeline, columns)


def _refuse_duplicates(spec: str, pipeline: str, columns: list[str]) -> None:
    dup = sorted({c for c in columns if columns.count(c) > 1})
    if dup:
        raise TransformError(
            f"transform {spec!r} of pipeline {pipeline!r}: output column(s) {dup} appear twice"
        )
