"""The data files a lake sink's publish adds and removes (step 1 of onceflow.commit,
sinks.lake.sink): an append table's staged files, with a re-run's rows removed; an upsert or
merge table's files holding a touched key, rewritten by the mode's rule."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from onceflow.ledger.attempt import Attempt
from onceflow.sinks.lake import compaction, merge, rewrite, upsert
from onceflow.sinks.lake.files import attempt_dir, txid_prefix
from onceflow.sinks.lake.versions import read_files, read_with_seq, schema_of

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
) -> tuple[list[tuple[str, int]], list[str]]:
    """upsert and merge: the files to add and remove (sinks.lake.rewrite)."""
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
    if sink.cfg.mode == "upsert":

        def earlier(keys: Any) -> Any:
            files = sink.versions.committed(cur, below=t.seq, without=t.txid)
            versions = read_with_seq(files, versions_schema, sink.storage)
            return versions.join(keys, key, join_type="left semi", use_threads=False)

        rows = upsert.decide(current, new, old, t.seq, key, schema.names, earlier)
    else:
        aggregates = list(sink.cfg.aggregates)

        def contributors(keys: Any) -> Any:
            files = sink.versions.committed(cur, without=t.txid)
            versions = read_with_seq(files, versions_schema, sink.storage)
            mine = versions.join(keys, key, join_type="left semi", use_threads=False)
            best = mine.group_by(key, use_threads=False).aggregate([("seq", "max")])
            return best.rename_columns(
                ["last_seq" if c == "seq_max" else c for c in best.column_names]
            )

        rows = merge.decide(current, new, old, t.seq, key, aggregates, contributors)
    directory = attempt_dir(sink.format.table_location(table), t.pipeline, t.txid, t.attempt)
    return rewrite.write_files(
        directory, rows, schema, sink.format.partitioner(table), sink.storage
    ), touched
