"""Which faults a chaos run injects, and when: the kinds and their variants, the ones a sink
or process mode adds or does without, and the schedule drawn from the seed (every fault once
in a seeded order, then extra random ones, spread over the batches)."""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

KINDS: dict[str, str] = {
    "1_driver_kill": "kill -9 of the spark-submit driver while it stages output",
    "2_spark_task_retry": "Spark task attempt fails before / after committing its part",
    "3_zombie_attempt": "zombie: earlier process attempt still running when the retry starts",
    "4_commit_killed": "commit task killed mid-transaction / right after the DB commit / "
    "(a sink outside the database) between the sink's commit and the ledger's / "
    "(a Kafka topic) with its Kafka transaction open",
    "5_scheduler_killed": "scheduler and its running tasks killed -9, restarted",
    "6_postgres_restarted": "PostgreSQL restarted during plan / process / commit",
    "7_broker_restarted": "broker killed -9 and restarted on its log (a Kafka sink: mid "
    "Kafka transaction), nothing lost / its log deleted: plan refuses the new log, reset",
    "8_rerun_committed": "committed run cleared and re-run by run id (API); "
    "an append-only sink refuses it",
    "9_failed_run_blocks": "run fails for good, later commits wait and say why, retry unblocks",
    "10_topic_recreated": "topic deleted, re-created and refilled past the committed offset: "
    "plan refuses the new log, reset",
}

# the faults of a pipeline that processes in a Spark Connect session (--process-mode connect)
CONNECT_KINDS: dict[str, str] = {
    "11_connect_server_killed": "the Spark Connect server killed -9 while a job stages, "
    "restarted (process_mode = connect)",
}
# the faults of a pipeline of change events (envelope = "debezium", onceflow_dev.chaos.cdc)
CDC_KINDS: dict[str, str] = {
    "12_kafka_connect_killed": "the Kafka Connect worker running Debezium killed -9 while "
    "changes stream, restarted: it sends again what it sent since its last offset flush",
}
# the faults of Apache Kafka as three brokers (ONCEFLOW_KAFKA_BROKERS=3)
CLUSTER_KINDS: dict[str, str] = {
    "13_rolling_restart": "every broker of three restarted in turn (SIGTERM, then on its log), "
    "each once the source is back in sync, while runs go on",
}
# and of three KRaft controllers (ONCEFLOW_KAFKA_CONTROLLERS=3)
QUORUM_KINDS: dict[str, str] = {
    "14_controller_failover": "the active KRaft controller killed -9 while runs go on: the "
    "other two elect a new one, the killed one rejoins",
}
ALL_KINDS = {**KINDS, **CONNECT_KINDS, **CDC_KINDS, **CLUSTER_KINDS, **QUORUM_KINDS}
CONNECT_FAULTS: tuple[tuple[str, str | None], ...] = (("11_connect_server_killed", None),)
# twice: each kill sends some changes again, wherever it lands in the order
CDC_FAULTS: tuple[tuple[str, str | None], ...] = (("12_kafka_connect_killed", None),) * 2
# the faults a pipeline of change events does without: Debezium's topics are its only copy
# of the changes it captured (its offsets are in the worker, past them), so a lost log or a
# re-created topic loses changes no pipeline can bring back; a new snapshot of the source
# would (docs/cdc.md)
NOT_CDC = {"7_broker_restarted/log_lost", "10_topic_recreated"}
# on three brokers: fault 7 kills the leader of a source partition in the middle of process
# (for a Kafka sink, the coordinator of its transaction in the middle of commit), twice,
# and the rolling restart; a broker's lost log is not a lost log there (its replicas
# rebuild it), so LOST_BROKER goes
CLUSTER_FAULTS: tuple[tuple[str, str | None], ...] = (
    ("7_broker_restarted", "log_kept"),
    ("13_rolling_restart", None),
)
QUORUM_FAULTS: tuple[tuple[str, str | None], ...] = (("14_controller_failover", None),)

# (kind, variant): the faults every schedule holds at least once
BASE_FAULTS: tuple[tuple[str, str | None], ...] = (
    ("1_driver_kill", None),
    ("2_spark_task_retry", None),
    ("3_zombie_attempt", None),
    ("4_commit_killed", "mid_transaction"),
    ("4_commit_killed", "after_db_commit"),
    ("5_scheduler_killed", None),
    ("6_postgres_restarted", "plan"),
    ("6_postgres_restarted", "process"),
    ("6_postgres_restarted", "commit"),
    ("7_broker_restarted", "log_kept"),
    ("7_broker_restarted", "log_lost"),
    ("8_rerun_committed", None),
    ("9_failed_run_blocks", None),
    ("10_topic_recreated", None),
)
# and for a sink outside the ledger's database (a lake table): the crash between its two
# commit steps (onceflow.commit)
OUTSIDE_FAULTS: tuple[tuple[str, str | None], ...] = (("4_commit_killed", "after_sink_publish"),)
# and for a Kafka topic: the crash with its Kafka transaction open, records produced (they
# must never reach a read_committed consumer; the retry's init_transactions aborts them)
KAFKA_FAULTS: tuple[tuple[str, str | None], ...] = (("4_commit_killed", "before_sink_commit"),)
# a base fault a Kafka topic sink does without: a lost broker takes the sink's published
# output with it (one broker holds both), which no pipeline can bring back
LOST_BROKER = ("7_broker_restarted", "log_lost")
# the failpoint each variant of 4_commit_killed kills the commit task at
COMMIT_KILL_POINTS = {
    "mid_transaction": "commit.before_db_commit",
    "after_db_commit": "commit.after_db_commit",
    "after_sink_publish": "commit.after_sink_publish",
    "before_sink_commit": "commit.before_sink_commit",
}
# extra random faults: the broker, topic and scheduler faults are expensive, drawn less often
EXTRA_WEIGHTS = {
    "7_broker_restarted": 0.25,
    "13_rolling_restart": 0.25,
    "14_controller_failover": 0.25,
    "10_topic_recreated": 0.25,
    "5_scheduler_killed": 0.5,
}
# faults that reach every run (or hold commits back): never overlapped with another fault
EXCLUSIVE = {
    "5_scheduler_killed",
    "6_postgres_restarted/plan",
    "6_postgres_restarted/process",
    "6_postgres_restarted/commit",
    "7_broker_restarted/log_kept",
    "7_broker_restarted/log_lost",
    "9_failed_run_blocks",
    "10_topic_recreated",
    "13_rolling_restart",
    "14_controller_failover",
}
FIRST_FAULT_BATCH = 2  # faults start once this many batches committed


@dataclass
class Fault:
    index: int
    kind: str
    variant: str | None
    at_batch: int  # starts once this many batches committed (and the previous fault is done)
    injected: bool = False
    recovered: bool = False
    tries: int = 0
    txids: list[str] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    started_s: float | None = None
    injected_s: float | None = None
    recovered_s: float | None = None

    @property
    def label(self) -> str:
        return self.kind + (f"/{self.variant}" if self.variant else "")


def fault_schedule(
    seed: int,
    batches: int,
    only: Iterable[str] | None = None,
    outside: bool = False,
    kafka: bool = False,
    connect: bool = False,
    cdc: bool = False,
    cluster: bool = False,
    quorum: bool = False,
) -> list[Fault]:
    """The faults of a run: every base fault once in a seeded order, then extra random ones.

    `only` (kind numbers such as "3" or "7") keeps the faults of those kinds (development);
    `outside` (a sink outside the ledger's database) adds OUTSIDE_FAULTS to the base ones,
    `kafka` (a Kafka topic) KAFKA_FAULTS and drops LOST_BROKER, `connect` (process_mode =
    "connect") CONNECT_FAULTS, `cdc` (a pipeline of change events) CDC_FAULTS and drops
    NOT_CDC, `cluster` (three brokers) CLUSTER_FAULTS and drops LOST_BROKER, `quorum` (three
    controllers) QUORUM_FAULTS.

    They are spread over the first ~70% of the batches (a fault starts once at_batch batches
    committed, and only after the previous one has ended, so they never overlap).
    """
    rng = random.Random(f"onceflow-chaos:{seed}")
    wanted = set(only or ())
    faults = (
        BASE_FAULTS
        + (OUTSIDE_FAULTS if outside else ())
        + (KAFKA_FAULTS if kafka else ())
        + (CONNECT_FAULTS if connect else ())
        + (CDC_FAULTS if cdc else ())
        + (CLUSTER_FAULTS if cluster else ())
        + (QUORUM_FAULTS if quorum else ())
    )
    if kafka or cluster:
        faults = tuple(f for f in faults if f != LOST_BROKER)
    if cdc:
        faults = tuple(f for f in faults if Fault(0, *f, 0).label not in NOT_CDC)
    pool = [(k, v) for k, v in faults if not wanted or k.split("_")[0] in wanted]
    if not pool:
        raise ValueError(
            f"no fault kind matches {sorted(wanted)}; kinds are "
            + ", ".join(sorted({k.split("_")[0] for k, _ in faults}, key=int))
        )
    base = list(pool)
    rng.shuffle(base)
    n_extra = max(0, (batches - 40) // 20)
    weights = [EXTRA_WEIGHTS.get(kind, 1.0) for kind, _ in pool]
    extra = rng.choices(pool, weights=weights, k=n_extra)
    chosen = base + extra
    first = FIRST_FAULT_BATCH
    last = max(first + len(chosen), int(batches * 0.7))
    step = (last - first) / len(chosen)
    return [
        Fault(i, kind, variant, first + int(i * step)) for i, (kind, variant) in enumerate(chosen)
    ]
