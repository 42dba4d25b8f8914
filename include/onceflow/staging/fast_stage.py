"""Fast stage: the transform's fast form is staged by the Python worker that reads the range.

For a record-wise transform with a fast form (onceflow.transforms.load_fast_form) into a
sink that takes one (Sink.takes_fast_form: a PostgreSQL append table), process stages each
input partition as TWO parts of the same attempt (their numbers: onceflow.staging.fence),
both under the part fence:

  accepted  the records the fast form accepts: parsed in the reader's Python worker
            (vectorised over Arrow batches) and COPYed from there, as the stage rows of the
            sink (the record's coordinates and the user's columns; error, key, value and
            tombstone NULL); they never enter the JVM;
  declined  the records it declines: handed on to the JVM, through the transform and the
            ordinary stage writer (onceflow.staging.writer).

Why: crossing into the JVM and back out to the stage writer was most of the process step's
CPU (bench/NOTES.md). Both parts are deterministic functions of their input partition (the
fast form's decision is a pure function of the record), so the fence's rules still hold:

- a task that dies before a part's commit leaves nothing of that part;
- a retried task finds its accepted part claimed and stages nothing there, but still reads
  the range to hand the declined records on, whose part is staged (or found claimed) like
  any other;
- a task of a fenced attempt fails before writing either part.

Accepted rows carry `row_hash` from onceflow.spark.rowhash, declined ones Spark's xxhash64: the
checksum of a txid stays the same in every attempt of one version.
The fast form's rows must have the user's columns of the transform's output, with its
types (process passes them as an Arrow schema): a fast form that disagrees fails the task
before its part commits, naming the columns, so nothing of it is staged; the driver knows
the failure as a TransformError (onceflow.staging.task_errors).

The declined records wait in a spooled temporary file (Arrow IPC; memory up to
DECLINED_SPOOL_BYTES, disk beyond) until the accepted part has committed, so a worker never
holds a part's declined values in memory, however many there are.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from onceflow.errors import TransformError, TransformRaisedError
from onceflow.formats.decoded_batch import decoded_fast_form
from onceflow.kafka.client import KafkaCluster
from onceflow.ledger.stage_jobs import StageJobRef, fast_stage_of
from onceflow.poison import raised_in_worker
from onceflow.ranges import OffsetRange
from onceflow.reader.frame import RangeReadFn, pieces_frame
from onceflow.spark.arrow_columns import fixed_array
from onceflow.staging.checksum import HASH_COLUMN
from onceflow.staging.target import StageTarget
from onceflow.staging.task_errors import for_driver
from onceflow.staging.writer import stage_part
from onceflow.transforms import COORDINATES

DECLINED_SPOOL_BYTES = 32 << 20


@dataclass
class SplitStats:
    """What one input partition's split saw (all of them: accepted + declined = records)."""

    records: int = 0
    accepted: int = 0
    declined: int = 0

    def as_tuple(self) -> tuple[int, int, int]:
        return (self.records, self.accepted, self.declined)


class Split:
    """Iterates the stage batches of the accepted records of `batches` (reader batches) and
    spools the declined records; `declined()` gives those back once the iteration is done.
    `columns`: the Arrow schema the fast form's rows must have (the user's columns of the
    transform `spec`'s output)."""

    def __init__(
        self,
        batches: Iterator[Any],
        fast_form: Callable[[Any], Any],
        columns: Any,
        spec: str = "",
    ) -> None:
        self._batches = batches
        self._fast_form = fast_form
        self._columns = columns
        self._spec = spec
        self._spool: Any = None
        self._writer: Any = None
        self.stats = SplitStats()

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        while True:
            batch = next(self._batches)  # StopIteration ends the split
            staged = self._split(batch)
            if staged is not None:
                return staged

    def _split(self, batch: Any) -> Any:
        import numpy as np
        import pyarrow as pa

        from onceflow.spark.rowhash import row_hash

        n = batch.num_rows
        try:
            accepted, rows = self._fast_form(batch)
        except Exception as e:
            # the user's code raised: marked, so process can tell it from Onceflow's faults
            # and look for the records it raised on (onceflow.poison)
            what = f"the fast form of transform {self._spec!r}"
            raise TransformRaisedError(raised_in_worker(what, e)) from None
        if not rows.schema.equals(self._columns) or len(rows) != len(accepted):
            raise for_driver(TransformError(self._disagreement(rows, len(accepted))))
        self.stats.records += n
        self.stats.accepted += len(accepted)
        if len(accepted) < n:
            declined = np.ones(n, dtype=bool)
            declined[accepted] = False
            where = np.flatnonzero(declined).astype(np.int64)
            self._spill(batch.take(fixed_array(pa.int64(), where)))
            self.stats.declined += len(where)
        out = None
        if len(accepted):
            at = fixed_array(pa.int64(), np.ascontiguousarray(accepted, dtype=np.int64))
            names = batch.schema.names
            columns = [batch.column(names.index(c)).take(at) for c in COORDINATES]
            columns += rows.columns
            h = fixed_array(pa.int64(), row_hash(columns))
            out = pa.RecordBatch.from_arrays(
                [*columns, h], names=[*COORDINATES, *rows.schema.names, HASH_COLUMN]
            )
        return out

    def _disagreement(self, rows: Any, accepted: int) -> str:
        where = f"the fast form of transform {self._spec!r}"
        if len(rows) != accepted:
            return f"{where} accepted {accepted} record(s) but gave {len(rows)} row(s)"
        want = [f"{f.name} {f.type}" for f in self._columns]
        got = [f"{f.name} {f.type}" for f in rows.schema]
        return (
            f"{where} gives rows of columns {got}, but the transform's output has the "
            f"columns {want} (besides topic, partition, offset, error, key, value): the fast "
            "form must give those, with these Arrow types, in this order"
        )

    def _spill(self, batch: Any) -> None:
        import pyarrow as pa

        if self._writer is None:
            self._spool = tempfile.SpooledTemporaryFile(  # noqa: SIM115 - closed by close()
                max_size=DECLINED_SPOOL_BYTES, prefix="onceflow-declined-"
            )
            self._writer = pa.ipc.new_stream(self._spool, batch.schema)
        self._writer.write_batch(batch)

    def drain(self) -> None:
        """Split what is left (after a part that was staged before, nothing was consumed)."""
        for _ in self:
            pass

    def declined(self) -> Iterator[Any]:
        """The declined records, in offset order, as the reader's batches."""
        import pyarrow as pa

        if self._writer is None:
            return
        self._writer.close()
        self._writer = None
        self._spool.seek(0)
        yield from pa.ipc.open_stream(self._spool)

    def close(self) -> None:
        if self._spool is not None:
            self._spool.close()


@dataclass(frozen=True)
class FastStage:
    """Where FastStageFn stages the accepted records (`target`; None: nowhere, the
    benchmark's read_parse) and the Arrow schema the fast form's rows must have
    (`columns`, fast_form_columns of the transform's output)."""

    target: StageTarget | None
    columns: Any


def _job_stage(job: StageJobRef | None) -> FastStage:
    """The FastStage the driver set for `job` once it built the job's plan
    (onceflow.ledger.stage_jobs). Why not in the function itself: the stage target is the
    sink bound to the transform's output, and that output is the transform over the very
    frame FastStageFn makes (its declined records). Handing it over at job time builds the
    transform's plan once (a build is py4j calls on the driver: about 0.7 s for the
    benchmark's JSON-parsing transform, bench/NOTES.md, issue 13)."""
    stage = None if job is None else fast_stage_of(job)
    if stage is None:
        raise for_driver(
            TransformError(
                "a transform with a fast form must not run a Spark job over its input while "
                "its plan is built (the reader's workers learn where to stage only in "
                "process's own job, onceflow.ledger.stage_jobs)"
            )
        )
    return stage


class FastStageFn(RangeReadFn):
    """mapInArrow function of `fast_stage_frame`: the input row with id j reads input
    partition j, stages its accepted records as their part (onceflow.staging.fence) and
    yields its declined records (reader SCHEMA).
    `transform`: the pipeline's transform ("module:transform", whose module has the fast
    form, imported in the worker); `stage`: where to stage and the Arrow schema of the fast
    form's rows, or None to take them from the stage job `job` (set_fast_stage).

    With the stage's target None nothing is staged (the benchmark's read_parse): the accepted
    records' SplitStats go to `stats`, a Spark accumulator, if given. `read`: RangeReadFn's
    options.
    """

    def __init__(
        self,
        pieces: list[OffsetRange],
        bootstrap: KafkaCluster | str,
        transform: str,
        stage: FastStage | None = None,
        *,
        job: StageJobRef | None = None,
        stats: Any = None,
        **read: Any,
    ) -> None:
        super().__init__(pieces, bootstrap, **read)
        self.transform = transform
        self.stage = stage
        self.job = job
        self.stats = stats

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        from onceflow.transforms import load_fast_form

        stage = self.stage if self.stage is not None else _job_stage(self.job)
        try:  # the transform's module, as this worker imports it
            fast_form = load_fast_form(self.transform)
        except TransformError as e:
            raise for_driver(e) from None
        if not self.transform and self.decoder is not None:
            fast_form = decoded_fast_form  # the decoded records land as they are
        if fast_form is None:
            raise for_driver(TransformError(f"transform {self.transform!r} has no fast form"))
        for ids in batches:
            for j in ids.column(0).to_pylist():
                split = Split(self.partition_records(j), fast_form, stage.columns, self.transform)
                try:
                    if stage.target is not None:  # the accepted records' part: j
                        stage_part(stage.target, j, split)
                    split.drain()
                    if self.stats is not None:
                        self.stats.add(split.stats.as_tuple())
                    yield from split.declined()
                finally:
                    split.close()


def fast_stage_frame(
    spark: Any,
    pieces: list[OffsetRange],
    bootstrap: KafkaCluster | str,
    transform: str,
    **options: Any,
) -> Any:
    """A DataFrame of the DECLINED records of `pieces` (reader SCHEMA; Spark partition j
    holds those of input partition j); computing it once the stage job's FastStage is set
    (onceflow.ledger.stage_jobs.set_fast_stage) stages the accepted records of input
    partition j as their part of the stage's target (onceflow.staging.fence). `options`:
    FastStageFn's (stage, job, stats; and the reader's: partitions, client, timeout_s,
    batch_records, client_conf, tally, skip)."""
    return pieces_frame(spark, FastStageFn(pieces, bootstrap, transform, **options))


def fast_form_columns(output: Any) -> Any:
    """The Arrow schema the fast form's rows must have: the user's columns of the
    transform's output frame `output` (a record-wise transform's, as the sink stages them),
    in its order, typed as Spark hands them to Arrow (timestamps in UTC)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_type

    from onceflow.transforms import user_columns

    users = set(user_columns(output.columns))
    return pa.schema(
        [
            pa.field(f.name, to_arrow_type(f.dataType, timezone="UTC"))
            for f in output.schema.fields
            if f.name in users
        ]
    )


class StatsParam:
    """AccumulatorParam of SplitStats tuples (records, accepted, declined)."""

    def zero(self, value: tuple[int, ...]) -> tuple[int, ...]:
        return (0, 0, 0)

    def addInPlace(self, a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:  # noqa: N802
        return tuple(x + y for x, y in zip(a, b, strict=True))
