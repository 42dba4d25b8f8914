"""What a deployment needs before its first run: the ledger's schema (`migrate`), the process
job's driver JVM class archive (`spark-archive`) and a pipeline's source topics for a producer
of one's own (`topics create`). Run again, each adds only what is missing (spark-archive
rewrites its archive with --force)."""

from __future__ import annotations

import argparse
import sys

from onceflow.cli.selection import select_pipeline
from onceflow.errors import ConfigError, PartitionCountError
from onceflow.settings import Settings


def cmd_migrate(args: argparse.Namespace, settings: Settings) -> int:
    from onceflow.ledger.db import migrate

    applied = migrate(settings.ledger)
    print("applied: " + (", ".join(applied) if applied else "nothing (up to date)"))
    if args.sinks or args.pipeline:
        migrate_sinks(settings, args.pipeline)
    return 0


def migrate_sinks(settings: Settings, names: list[str] | None, changes_only: bool = False) -> None:
    """The sink tables an earlier version made, of the named pipelines or of every one in
    the pipelines file (sinks.postgres.append_migration, sinks.postgres.versions_migration),
    each in its own transaction; says what it did per pipeline (with `changes_only`, only
    where it migrated something)."""
    from onceflow.config.pipelines_file import get_pipeline, load_pipelines
    from onceflow.hooks.sink import sink_for
    from onceflow.ledger.db import transaction
    from onceflow.sinks.postgres.append_migration import migrate_append
    from onceflow.sinks.postgres.sink import PostgresSink
    from onceflow.sinks.postgres.versions_migration import migrate_versions

    if names:
        pipelines = [get_pipeline(settings.pipelines_file, n) for n in names]
    else:
        pipelines = list(load_pipelines(settings.pipelines_file).values())
    for cfg in pipelines:
        sink = sink_for(cfg)
        done = None
        if isinstance(sink, PostgresSink):
            with transaction(settings.ledger) as cur:
                done = migrate_append(cur, cfg.name, sink) or migrate_versions(cur, cfg.name, sink)
        if done or not changes_only:
            print(f"pipeline {cfg.name}: " + (str(done) if done else "sink tables up to date"))


def cmd_spark_archive(args: argparse.Namespace, settings: Settings) -> int:
    from onceflow.errors.process import SparkArchiveError
    from onceflow.spark import jvm_archive

    try:
        path = jvm_archive.build(force=args.force)
    except SparkArchiveError as e:
        print(e, file=sys.stderr)
        return 1
    if path is not None:
        print(f"process tasks submit with: {jvm_archive.java_options(path)}")
    return 0


def cmd_topics(args: argparse.Namespace, settings: Settings) -> int:
    """`topics create`: the pipeline's source topics for the user's own producer, which
    (unlike `onceflow-dev produce`) needs no `sample` in the transform's module."""
    from onceflow.kafka import broker

    cfg = select_pipeline(settings, args.pipeline)
    if args.partitions < 1:
        raise PartitionCountError(cfg.name, args.partitions)
    if cfg.topic_pattern:
        raise ConfigError(
            f"pipeline {cfg.name!r} reads {cfg.topics_label}: it names no topic to create; "
            "its producers (Debezium, say) create them"
        )
    found = broker.ensure_topics(settings.kafka_bootstrap, cfg.topics, args.partitions)
    for topic, (created, partitions) in found.items():
        print(f"topic {topic}: {_topic_outcome(created, partitions, args.partitions)}")
    return 0


def _topic_outcome(created: bool, partitions: int, wanted: int) -> str:
    if created:
        return f"created with {partitions} partition(s) on the broker"
    if partitions == wanted:
        return f"exists with {partitions} partition(s), left as it is"
    return (
        f"exists with {partitions} partition(s), left as it is (not {wanted}: a partition "
        "count is changed on the broker, never by Onceflow)"
    )
