"""The data files a lake sink's publish adds and removes (step 1 of onceflow.commit,
sinks.lake.sink): an append table's staged files, with a re-run's rows removed; an upsert or
merge table's files holding a touched key, rewritten by the mode's rule."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from onceflow.ledger.attempt import Attempt
from onceflow.sinks.lake import compaction, rewrite
from onceflow.sinks.lake.files import attempt_dir, txid_prefix
from onceflow.sinks.lake.versions import read_files, schema_of

if TYPE_CHECKING:
    from onceflow.sinks.lake.sink import LakeSink


def append_files(
    sink: LakeSink, table: Any, t: Attempt, staged: list[tuple[str, int]], replace: bool
) -> tuple[list[tuple[str, int]], list[str]]:
    """append: the staged files to add and, with `replace`, the txid's rows to remove:
    its live files (by their folder) removed whole, and a compacted file holding some
    of its rows rewritten without them. A staged file already live (the table published
    this attempt, and its record of that was expired since) is neither. Without
    `replace` the table holds nothing of the txid (maintenance keeps the record of a
    publication the ledger has not committed on), so its files are not listed."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not replace:
        return staged, []
    live = sink.format.live_files(table)
    prefix = txid_prefix(sink.format.table_location(table), t.pipeline, t.txid)
    mine = {f for f in live if f.startswith(prefix)}
    adds = [(p, n) for p, n in staged if p not in mine]
    removes = sorted(mine - {p for p, _ in staged})
    others = [f for f in live if f not in mine]
    schema = sink.format.table_schema(table)
    txid = pa.table({"txid": pa.array([t.txid], pa.string())})
    shared = rewrite.touched_files(others, schema, txid, ["txid"], sink.storage)
    if shared:
        rows = read_files(shared, schema, sink.storage)
        rows = rows.filter(pc.not_equal(rows.column("txid"), t.txid))
        # other txids' rows: outside any txid's folder
        folder = compaction.compacted_dir(sink.format.table_location(table), t.pipeline)
        adds += rewrite.write_files(
            folder, rows, schema, sink.format.partitioner(table), sink.storage
        )
        removes += shared
    return adds, removes


def rewritten_files(
    sink: LakeSink,
    cur,
    table: Any,
    t: Attempt,
    staged: list[tuple[str, int]],
    old_attempt: int | None,
    replace: bool,
    decide: Callable[[Rewrite], Any],
) -> tuple[list[tuple[str, int]], list[str]]:
    """upsert and merge: the files to add and remove (sinks.lake.rewrite): the files holding
    a key the attempt's versions (or the replaced attempt's) touch, rewritten with the rows
    the mode's rule `decide`s."""
    key = list(sink.cfg.key)
    old_paths = sink.versions.of_attempt(cur, t.txid, old_attempt) if replace else []
    paths = [p for p, _ in staged]
    if not paths and not old_paths:
        return [], []
    versions_schema = schema_of([*paths, *old_paths], sink.storage)
    new = read_files(paths, versions_schema, sink.storage)
    old = read_files(old_paths, versions_schema, sink.storage)
    schema = sink.format.table_schema(table)
    keys = rewrite.rewrite_keys(new, old, key)
    live = sink.format.live_files(table)
    touched = rewrite.touched_files(live, schema, keys, key, sink.storage)
    current = read_files(touched, schema, sink.storage)
    rows = decide(Rewrite(current, new, old, key, schema, versions_schema))
    directory = attempt_dir(sink.format.table_location(table), t.pipeline, t.txid, t.attempt)
    return rewrite.write_files(
        directory, rows, schema, sink.format.partitioner(table), sink.storage
    ), touched


@dataclass(frozen=True)
class Rewrite:
    """What a mode's rule decides the rewritten rows from: the `current` rows of the files
    touched, the attempt's `new` versions and the replaced attempt's `old` ones, the `key`,
    the table's `schema` and the versions' one."""

    current: Any
    new: Any
    old: Any
    key: list[str]
    schema: Any
    versions_schema: Any
