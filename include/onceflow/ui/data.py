"""What the pages and endpoints show, read from the ledger (onceflow.ledger.views) and the broker.

The broker is asked with a deadline and the answer cached for a moment: the ledger view must
still render, showing lag as "unavailable", when the broker is down or slow.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from onceflow.config.pipeline import PipelineConfig
from onceflow.config.pipelines_file import load_pipelines
from onceflow.errors import OnceflowError, TopicMissingError
from onceflow.hooks import ledger as ledger_hook
from onceflow.hooks.kafka import kafka_cluster
from onceflow.hooks.sink import sink_for
from onceflow.kafka import broker
from onceflow.kafka.client import KafkaCluster
from onceflow.ledger import views
from onceflow.ledger.db import Ledger
from onceflow.ledger.ordering import blocking_predecessor
from onceflow.ledger.states import CLOSED, BatchState
from onceflow.settings import Settings

BROKER_TIMEOUT = 3.0  # seconds a page waits for end offsets before showing "unavailable"
BROKER_CACHE_SECONDS = 2.0
_Key = tuple[KafkaCluster, tuple[str, ...]]  # a cluster and the topics asked of it
_cache: dict[_Key, tuple[float, broker.PartitionEnds | None, str | None]] = {}
# At most one broker call in flight per (bootstrap, topics): a down broker makes a call hang for
# the client's request timeout (30 s), and requests meanwhile wait on that same call instead of
# piling up threads. Daemon threads, so a hung call never delays the api-server's shutdown.
_inflight: dict[_Key, Future] = {}
_lock = threading.Lock()

PIPELINE_PREFIX = "onceflow_"


@dataclass(frozen=True)
class BrokerEnds:
    ends: dict[tuple[str, int], int] | None  # None: unavailable
    error: str | None = None

    @property
    def available(self) -> bool:
        return self.ends is not None


def settings() -> Settings:
    """Read per request: the api-server's ONCEFLOW_* environment, as the stack sets it."""
    return Settings.from_env()


def pipelines(s: Settings) -> dict[str, PipelineConfig]:
    return load_pipelines(s.pipelines_file)


def pipeline_of_dag(dag_id: str) -> str | None:
    """`onceflow_<pipeline>` -> pipeline; None for DAGs that are not Onceflow pipelines."""
    return dag_id[len(PIPELINE_PREFIX) :] if dag_id.startswith(PIPELINE_PREFIX) else None


def _call_in_thread(fn, *args) -> Future:
    future: Future = Future()

    def run() -> None:
        try:
            future.set_result(fn(*args))
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting request
            future.set_exception(exc)

    threading.Thread(target=run, name="onceflow-broker", daemon=True).start()
    return future


def ledger_of(cfg: PipelineConfig) -> Ledger:
    """The pipeline's ledger: its Airflow connection, else ONCEFLOW_POSTGRES_DSN (per
    request: a rotated password is read the next time)."""
    return ledger_hook.ledger_of(cfg.ledger_conn_id, cfg.source)


def broker_ends(cfg: PipelineConfig, timeout: float | None = None) -> BrokerEnds:
    """End offsets of the pipeline's partitions, or why they are unavailable (no answer
    within `timeout` seconds, default BROKER_TIMEOUT)."""
    return pipelines_ends([cfg], timeout)[cfg.name]


def pipelines_ends(
    cfgs: list[PipelineConfig], timeout: float | None = None
) -> dict[str, BrokerEnds]:
    """Per pipeline, the end offsets of its partitions or why they are unavailable. One
    broker call per cluster asks for every topic of its pipelines, all clusters at once,
    within one deadline of `timeout` seconds (default BROKER_TIMEOUT)."""
    timeout = BROKER_TIMEOUT if timeout is None else max(timeout, 0.0)
    deadline = time.monotonic() + timeout
    out: dict[str, BrokerEnds] = {}
    by_cluster: dict[KafkaCluster, list[PipelineConfig]] = {}
    for cfg in cfgs:
        try:
            cluster = kafka_cluster(cfg.kafka_conn_id, cfg.source)
        except OnceflowError as exc:
            out[cfg.name] = BrokerEnds(None, str(exc))
            continue
        by_cluster.setdefault(cluster, []).append(cfg)
    asked = {
        cluster: _ask(cluster, tuple(sorted({t for c in group for t in c.subscription}, key=str)))
        for cluster, group in by_cluster.items()
    }  # every call started before any is waited on
    for cluster, group in by_cluster.items():
        answer, error = _answer(cluster, asked[cluster], deadline, timeout)
        for cfg in group:
            missing = sorted(set(cfg.topics) & answer.missing) if answer is not None else []
            if answer is None or missing:
                why = error or str(TopicMissingError(cfg.name, missing[0], cluster.bootstrap))
                out[cfg.name] = BrokerEnds(None, why)
            else:
                ends = {tp: e for tp, e in answer.ends.items() if cfg.reads(tp[0])}
                out[cfg.name] = BrokerEnds(ends)
    return out


_Asked = tuple[_Key, tuple[float, broker.PartitionEnds | None, str | None] | Future]


def _ask(cluster: KafkaCluster, topics: tuple[str, ...]) -> _Asked:
    """The cached answer for these topics, else the call in flight for them (started if
    none is)."""
    key = (cluster, topics)
    with _lock:
        hit = _cache.get(key)
        if hit and time.monotonic() - hit[0] < BROKER_CACHE_SECONDS:
            return key, hit
        future = _inflight.get(key)
        if future is None or future.done():
            future = _call_in_thread(broker.partition_ends, cluster, topics)
            _inflight[key] = future
    return key, future


def _answer(
    cluster: KafkaCluster, asked: _Asked, deadline: float, timeout: float
) -> tuple[broker.PartitionEnds | None, str | None]:
    """The answer asked for, waited on until `deadline` (`timeout` s after the asking)."""
    key, pending = asked
    if not isinstance(pending, Future):
        return pending[1], pending[2]
    answer: broker.PartitionEnds | None = None
    error: str | None = None
    try:
        answer = pending.result(timeout=max(deadline - time.monotonic(), 0.0))
    except FutureTimeout:
        error = f"broker {cluster} did not answer within {timeout:g} s"
    except Exception as exc:  # noqa: BLE001 - any broker failure means "lag unavailable"
        error = f"broker {cluster}: {type(exc).__name__}: {exc}"
    with _lock:
        _cache[key] = (time.monotonic(), answer, error)
    return answer, error


def partitions(cfg: PipelineConfig, ends: BrokerEnds | None = None) -> dict[str, Any]:
    """The pipeline's partitions with their lag, and the total; the broker is asked unless
    its `ends` are given (the overview asks once for every pipeline)."""
    ends = broker_ends(cfg) if ends is None else ends
    rows = views.partitions(ledger_of(cfg), cfg.name, ends.ends)
    if not ends.available:
        for r in rows:
            r["broker_end_offset"] = None
            r["lag"] = None
    return {
        "pipeline": cfg.name,
        "broker_available": ends.available,
        "broker_error": ends.error,
        "total_lag": sum(r["lag"] or 0 for r in rows) if ends.available else None,
        "partitions": rows,
    }


def block_reason(block: dict[str, Any] | None) -> str | None:
    """Why commits wait, in words an on-call engineer can act on."""
    if not block:
        return None
    state = block["state"]
    why = {
        BatchState.PLANNED: "planned but never processed (its run failed before process, or "
        "was never run)",
        BatchState.PROCESSING: "still processing (or its process attempt died)",
        BatchState.STAGED: "staged and about to commit (or its commit task failed)",
    }.get(state, state)
    if views.shown_state(block) != state:  # its newest process attempt failed
        why = f"processing, and its process attempt {block['attempt']} failed"
    text = (
        f"commits of {block['waiting']} later batch(es) wait for txid {block['txid']} "
        f"(seq {block['seq']}), which is {why}"
    )
    if block.get("last_error"):
        text += f". Last error: {block['last_error']}"
    if block.get("last_error") or state == BatchState.PLANNED:
        text += ". Clear or retry that DAG run to unblock."
    return text


def pipeline_overview(cfg: PipelineConfig, ends: BrokerEnds | None = None) -> dict[str, Any]:
    """A pipeline's row of the overview; with its broker `ends`, its total lag (None when
    they are unavailable)."""
    block = views.commit_block(ledger_of(cfg), cfg.name)
    lag = None if ends is None else partitions(cfg, ends)["total_lag"]
    return {
        "lag": lag,
        "broker_error": None if ends is None else ends.error,
        "pipeline": cfg.name,
        "dag_id": cfg.dag_id,
        "topics": list(cfg.topics) or [cfg.topics_label],
        "summary": views.summary(ledger_of(cfg), cfg.name),
        "blocked": block,
        "blocked_reason": block_reason(block),
        "commit_name": sink_for(cfg).commit_name,
    }


def topic_summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Partitions (views.partitions, with lag) summed up per topic: how many, committed
    offsets, lag, and the partition that lags most."""
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        t = out.setdefault(
            r["topic"],
            {
                "topic": r["topic"],
                "partitions": 0,
                "committed_offsets": 0,
                "lag": 0,
                "max_lag": None,
            },
        )
        t["partitions"] += 1
        t["committed_offsets"] += r["committed_offset"]
        if r.get("lag") is not None:
            t["lag"] += r["lag"]
            if t["max_lag"] is None or r["lag"] > t["max_lag"]["lag"]:
                t["max_lag"] = {"partition": r["partition"], "lag": r["lag"]}
    return list(out.values())


def ledger_view(cfg: PipelineConfig, limit: int, before: int | None = None) -> dict[str, Any]:
    """Everything the per-pipeline ledger page shows: a page of `limit` batches below seq
    `before` (the newest without it)."""
    data = pipeline_overview(cfg)
    parts = partitions(cfg)
    parts["topics"] = topic_summary(parts["partitions"])
    data.update(
        batches=views.batches(ledger_of(cfg), cfg.name, limit=limit, before_seq=before),
        before=before,
        limit=limit,
        history=views.history(ledger_of(cfg), cfg.name),
        partitions=parts,
        losses=views.losses(ledger_of(cfg), cfg.name),
        resets=views.resets(ledger_of(cfg), cfg.name),
        abandoned=views.abandoned(ledger_of(cfg), cfg.name),
        schema_changes=views.schema_changes(ledger_of(cfg), cfg.name),
        sink_tables=views.sink_tables(ledger_of(cfg), cfg.name),
    )
    return data


def batch_view(
    cfg: PipelineConfig, txid: str, dl_limit: int = 100, dl_offset: int = 0
) -> dict[str, Any]:
    """One txid's ledger entry; raises UnknownTxidError when plan has not recorded it."""
    b = views.batch(ledger_of(cfg), cfg.name, txid)
    wait = None
    if b["state"] not in CLOSED:
        w = blocking_predecessor(ledger_of(cfg), cfg.name, txid)
        if w is not None:
            wait = {"txid": w.txid, "seq": w.seq, "state": w.state, "last_error": w.last_error}
    return {
        "pipeline": cfg.name,
        "dag_id": cfg.dag_id,
        "commit_name": sink_for(cfg).commit_name,
        "batch": b,
        "losses": views.batch_losses(ledger_of(cfg), cfg.name, txid),
        "waits_for": wait,
        "dead_letters": views.dead_letter_page(
            ledger_of(cfg), cfg.name, txid, limit=dl_limit, offset=dl_offset
        ),
    }
