"""Removing the data files of process attempts that never publish.

Process writes a sink's data files before anyone knows which attempt will publish
(onceflow.staging): a fenced zombie's, an overtaken retry's, an abandoned txid's files
are never referenced by the table, but they take space. The rule, for each file under a
txid's `attempt=<n>` folder:

    it is removed only when attempt n can no longer stage or publish anything
    (ledger.fencing.live_attempts: not the txid's newest, staged or published attempt), and no
    commit of the sink ever recorded attempt n (an Iceberg snapshot's summary).

The first condition never removes what a commit may still publish or a running attempt is
still writing; it needs no lock, since an attempt that is not live never becomes live again.
The second keeps the files of an attempt published once and since replaced (a re-run, or
a publish whose ledger step failed): the table's history references them, and trimming
history is Iceberg's own snapshot expiry, not Onceflow's. What a file looks like (recorded
in the files table or not) does not matter.

Two callers apply it: commit, for its txid, after the ledger transaction (best effort: a
failure is logged, the files stay for the next), and `onceflow cleanup` for a pipeline.
A fenced task may still be writing when its attempt's folder is emptied; what it writes
then is removed by the next cleanup.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from onceflow.config.pipeline import PipelineConfig
from onceflow.hooks.sink import sink_for
from onceflow.ledger.attempt import Attempt
from onceflow.ledger.db import Ledger, transaction
from onceflow.ledger.fencing import live_attempts
from onceflow.sinks.base import Sink
from onceflow.sinks.outside import OutsideSink

log = logging.getLogger("onceflow.staging.file_cleanup")


@dataclass(frozen=True)
class Removal:
    """The files of one attempt that the rule removes."""

    txid: str
    attempt: int
    paths: tuple[str, ...]


def unpublishable(
    ledger: Ledger, cfg: PipelineConfig, txid: str | None = None, sink: Sink | None = None
) -> list[Removal]:
    """The files the rule removes, per attempt, of the pipeline (or of one txid)."""
    sink = sink or sink_for(cfg)
    if not isinstance(sink, OutsideSink):
        return []
    with transaction(ledger) as cur:
        live = live_attempts(cur, cfg.name, txid)
        found = sink.staged_files(cur, cfg.name, set(live))
    return [
        Removal(t, attempt, tuple(sorted(paths)))
        for (t, attempt), paths in sorted(found.files.items())
        if attempt not in live[t] and (t, attempt) not in found.published
    ]


def remove(cfg: PipelineConfig, removals: list[Removal], sink: Sink | None = None) -> int:
    """Delete the files of `removals` (unpublishable's answer); how many."""
    sink = sink or sink_for(cfg)
    paths = [p for r in removals for p in r.paths]
    if paths and isinstance(sink, OutsideSink):
        sink.remove_files(paths)
    return len(paths)


def after_commit(ledger: Ledger, cfg: PipelineConfig, t: Attempt, sink: Sink) -> None:
    """Commit's share: the files of the committed txid's other attempts (than t's), best
    effort."""
    txid = t.txid
    try:
        removed = remove(cfg, unpublishable(ledger, cfg, txid, sink), sink)
    except Exception as e:  # noqa: BLE001 - the commit stands; `onceflow cleanup` retries
        log.warning(
            "txid %s committed, but removing its other attempts' data files failed (%s: %s);"
            " `onceflow cleanup --pipeline %s --yes` removes them later",
            txid,
            type(e).__name__,
            e,
            cfg.name,
        )
        return
    if removed:
        log.info("txid %s: removed %d data file(s) of attempts that never publish", txid, removed)
