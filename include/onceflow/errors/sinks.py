"""A sink outside the database: it moved, is unreachable, refused a publish or a re-run,
lost its table, or is no lake table to maintain."""

from __future__ import annotations

from onceflow.errors.base import OnceflowError


class SinkMovedError(OnceflowError):
    """A sink outside the database changed between commit's read and its publish (another
    commit won the sink's optimistic concurrency): nothing was published; read it again."""


class SinkUnavailableError(OnceflowError):
    """A sink outside the database could not be read or written (its storage or catalog
    unreachable, a staged file gone): nothing was published; the message names the sink and
    where it lives, and a retry of the commit may succeed."""


class SinkRejectedError(OnceflowError):
    """A sink outside the database refused a publish for a reason a retry alone cannot mend
    (a record larger than the topic takes, an output topic missing that the pipeline may not
    create): nothing was published; the message says what to change, and the commit's retry
    after that publishes once."""


class LakeFileOutsideTableError(SinkRejectedError):
    """A data file staged for a lake table lies outside the table's location (the table was
    moved, or the sink's storage names another root than the table's): nothing was
    published, since the table's log can only name files under its root."""

    def __init__(self, table: str, uri: str, root: str) -> None:
        self.table, self.uri, self.root = table, uri, root
        super().__init__(
            f"{table}: staged data file {uri} is not under the table's location {root}; "
            "nothing was published (was the table moved, or does the sink's storage "
            "connection name another root?)"
        )


class RerunRefusedError(OnceflowError):
    """A committed txid cannot be re-run into an append-only sink (a Kafka topic): its records
    were delivered and cannot be replaced; the message says what to do instead."""


class LakeTableMissingError(OnceflowError):
    """A lake sink's table is gone (dropped?) while the attempt being published staged data
    files for it: nothing was published. `table`: the table as messages name it ("Iceberg
    table ns.t"); `files`: how many data files the attempt staged."""

    def __init__(
        self, pipeline: str, txid: str, seq: int, attempt: int, table: str, files: int
    ) -> None:
        self.pipeline, self.txid, self.seq, self.attempt = pipeline, txid, seq, attempt
        self.table, self.files = table, files
        super().__init__(
            f"{table} does not exist, but txid {txid!r} attempt "
            f"{attempt} staged {files} data file(s) for it: was it dropped?"
        )


class NotALakeSinkError(OnceflowError):
    """`onceflow maintain` (or a DAG's maintain task) for a pipeline whose sink is no lake
    table and no PostgreSQL append or upsert table: there is nothing to compact, expire or
    roll up."""

    def __init__(self, pipeline: str, sink: str) -> None:
        self.pipeline = pipeline
        super().__init__(
            f"pipeline {pipeline!r} publishes to {sink}: maintenance is for lake tables "
            '(kind = "iceberg" or "delta": compaction, expiry) and PostgreSQL append and upsert '
            "tables (their one-batch partitions rolled up) only"
        )
