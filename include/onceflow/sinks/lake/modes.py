"""A lake sink's publish mode, as an object (the lake's counterpart of
sinks.postgres.mode): what a publish adds to and removes from the table, whether the
committed txids' versions are kept (sinks.lake.versions), what the audit reads as the
published records, and the mode's own truth. LakeSink holds one and asks it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from onceflow.ledger.attempt import Attempt
from onceflow.sinks.lake import layout, merge, publish_files, upsert
from onceflow.sinks.lake.audit import AUDIT_COLUMNS, differing_keys, empty_audit_rows
from onceflow.sinks.lake.layout import Layout, Types
from onceflow.sinks.lake.publish_files import Rewrite
from onceflow.sinks.lake.versions import read_with_seq
from onceflow.sinks.outside import SinkReading

if TYPE_CHECKING:
    from onceflow.sinks.lake.sink import LakeSink

Files = tuple[list[tuple[str, int]], list[str]]


class LakeMode(ABC):
    """How `sink`'s table is published."""

    name: str
    # the columns of the table and of its staged files (sinks.lake.layout)
    layout_of: Callable[..., Layout]
    # whether the staged files are versions a publish folds into the table's files, kept
    # per committed txid (upsert, merge), rather than the table's own data files (append)
    keeps_versions = True

    def __init__(self, sink: LakeSink) -> None:
        self.sink = sink

    def layout(
        self,
        name: str,
        fixed: Sequence[tuple[str, str]],
        users: Sequence[tuple[str, str]],
        types: Types,
    ) -> Layout:
        """The table's and the staged files' columns, from the format's `fixed` columns and
        the output's `users` (sinks.lake.layout); `name`: the table as messages name it."""
        return type(self).layout_of(name, self.sink.cfg, fixed, users, types)

    @abstractmethod
    def files(
        self,
        cur,
        table: Any,
        t: Attempt,
        staged: list[tuple[str, int]],
        reading: SinkReading,
        replace: bool,
    ) -> Files:
        """The files a publish of the attempt's `staged` files adds and removes."""

    def record_published(self, cur, t: Attempt) -> None:
        """Step 2: keep the published attempt's files as the txid's versions."""
        if self.keeps_versions:
            self.sink.versions.record(cur, t)

    def audit_rows(self, table: Any, versions: Callable[[], Any]) -> Any:
        """The published records' coordinates (AUDIT_COLUMNS): the committed txids'
        versions (`versions()`, None when there are none)."""
        found = versions()
        return empty_audit_rows() if found is None else found.select(list(AUDIT_COLUMNS))

    def truth(self, table: Any, versions: Callable[[], Any]) -> list[str]:
        """The mode's own truth of the table (the audit's)."""
        return []


class LakeAppend(LakeMode):
    """append: the staged files are added as they are (publish_files.append_files)."""

    name = "append"
    layout_of = staticmethod(layout.append_layout)
    keeps_versions = False

    def files(self, cur, table, t, staged, reading, replace) -> Files:
        return publish_files.append_files(self.sink, table, t, staged, replace)

    def audit_rows(self, table: Any, versions: Callable[[], Any]) -> Any:
        return self.sink.format.scan(table, AUDIT_COLUMNS)


class FoldingMode(LakeMode):
    """A mode whose table is a fold of the committed txids' versions: a publish rewrites
    the files holding a key the txid touches (publish_files.rewritten_files)."""

    # what a key's row must be, as the audit says it
    should_be: str

    def files(self, cur, table, t, staged, reading, replace) -> Files:
        found = reading.publication
        old = (found.attempt if found else None) if replace else None
        return publish_files.rewritten_files(
            self.sink, cur, table, t, staged, old, replace, lambda r: self.decide(cur, t, r)
        )

    def committed_versions(self, cur, r: Rewrite, **only: Any) -> Any:
        """The committed txids' versions (sinks.lake.versions.committed's `only`), with
        their seq."""
        files = self.sink.versions.committed(cur, **only)
        return read_with_seq(files, r.versions_schema, self.sink.storage)

    @abstractmethod
    def decide(self, cur, t: Attempt, r: Rewrite) -> Any:
        """The rows of the rewritten files."""

    @abstractmethod
    def expected(self, versions: Any, rows: Any, key: list[str]) -> tuple[Any, list[str]]:
        """The rows the committed versions make (empty without versions), and the columns
        compared with the table's."""

    def truth(self, table: Any, versions: Callable[[], Any]) -> list[str]:
        sink = self.sink
        key = list(sink.cfg.key)
        rows = sink.format.scan(table, [f.name for f in sink.format.table_schema(table)])
        expected, compared = self.expected(versions(), rows, key)
        wrong = differing_keys(expected.select(compared), rows.select(compared), key)
        return [
            f"{sink.table_kind} {sink.name} key {k}: the row is not {self.should_be}"
            for k in wrong[:20]
        ]


class LakeUpsert(FoldingMode):
    """upsert: each key's row is its newest committed version (sinks.lake.upsert)."""

    name = "upsert"
    layout_of = staticmethod(layout.upsert_layout)
    should_be = "the last committed record for it"

    def decide(self, cur, t: Attempt, r: Rewrite) -> Any:
        order_by = self.sink.cfg.order_by

        def earlier(keys: Any) -> Any:  # with order_by, any seq's versions may win
            below = {} if order_by else {"below": t.seq}
            versions = self.committed_versions(cur, r, without=t.txid, **below)
            return versions.join(keys, r.key, join_type="left semi", use_threads=False)

        if order_by:
            return upsert.decide_ordered(
                r.current, r.new, r.old, t.seq, r.key, r.schema.names, order_by, earlier
            )
        return upsert.decide(r.current, r.new, r.old, t.seq, r.key, r.schema.names, earlier)

    def expected(self, versions: Any, rows: Any, key: list[str]) -> tuple[Any, list[str]]:
        import pyarrow.compute as pc

        if versions is None:
            return rows.slice(0, 0), rows.column_names
        newest = upsert.newest_per_key(versions, key, self.sink.cfg.order_by)
        return newest.filter(pc.invert(newest.column("tombstone"))), rows.column_names


class LakeMerge(FoldingMode):
    """merge: the state is the fold of the committed txids' partials (sinks.lake.merge)."""

    name = "merge"
    layout_of = staticmethod(layout.merge_layout)
    should_be = "the fold of the committed txids' partial aggregates"

    def decide(self, cur, t: Attempt, r: Rewrite) -> Any:
        def contributors(keys: Any) -> Any:
            versions = self.committed_versions(cur, r, without=t.txid)
            mine = versions.join(keys, r.key, join_type="left semi", use_threads=False)
            best = mine.group_by(r.key, use_threads=False).aggregate([("seq", "max")])
            return best.rename_columns(
                ["last_seq" if c == "seq_max" else c for c in best.column_names]
            )

        aggregates = list(self.sink.cfg.aggregates)
        return merge.decide(r.current, r.new, r.old, t.seq, r.key, aggregates, contributors)

    def expected(self, versions: Any, rows: Any, key: list[str]) -> tuple[Any, list[str]]:
        aggregates = list(self.sink.cfg.aggregates)
        folded = merge.fold(versions, key, aggregates) if versions else None
        return (
            rows.slice(0, 0) if folded is None else folded,
            [*key, *aggregates, "last_seq"],
        )


# The mode of each `mode` a pipelines file may name.
LAKE_MODES: dict[str, type[LakeMode]] = {m.name: m for m in (LakeAppend, LakeUpsert, LakeMerge)}
