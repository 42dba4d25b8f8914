"""What a lake table's commit records of Onceflow, whatever the format (an Iceberg
snapshot's summary, a Delta commit's commit info): the same `onceflow.*` properties.

- A publish: onceflow.pipeline, onceflow.txid, onceflow.seq, onceflow.attempt and
  onceflow.records (the records published: an upsert or merge commit rewrites rows, so the
  format's own count of rows added says something else). The table's history is the
  sink's own record of what it published, which step 1 of a commit reads ("is this seq
  already published, and by which attempt?") and the audit checks against the ledger.
- A maintenance commit (onceflow.maintenance): onceflow.pipeline and what it did; it
  publishes nothing, so it is no publication.
"""

from __future__ import annotations

from collections.abc import Mapping

from onceflow.ledger.attempt import Attempt
from onceflow.sinks.outside import Publication

PREFIX = "onceflow."


def publication_summary(t: Attempt, records: int) -> dict[str, str]:
    """What the commit publishing t's `records` records of it."""
    return {
        f"{PREFIX}pipeline": t.pipeline,
        f"{PREFIX}txid": t.txid,
        f"{PREFIX}seq": str(t.seq),
        f"{PREFIX}attempt": str(t.attempt),
        f"{PREFIX}records": str(records),
    }


def maintenance_summary(pipeline: str, what: str) -> dict[str, str]:
    """What a maintenance commit of the pipeline's table records."""
    return {f"{PREFIX}pipeline": pipeline, f"{PREFIX}maintenance": what}


def publication(
    props: Mapping[str, str | None],
    pipeline: str,
    ref: str,
    at_ms: int,
    records: str | None = None,
) -> Publication | None:
    """The publication a commit's properties record for the pipeline, or None (another
    pipeline's, a maintenance commit, a commit not Onceflow's). `records`: what the format
    counted, for a commit of an earlier version that did not record onceflow.records."""
    if props.get(f"{PREFIX}pipeline") != pipeline or props.get(f"{PREFIX}seq") is None:
        return None
    return Publication(
        pipeline,
        str(props[f"{PREFIX}txid"]),
        int(str(props[f"{PREFIX}seq"])),
        int(str(props[f"{PREFIX}attempt"])),
        int(props.get(f"{PREFIX}records") or records or 0),
        ref,
        at_ms,
    )
