"""The process driver JVM's just-in-time compiler: C1 alone where C2 costs more than it gains.

C2 compiles for a peak speed the JVM reaches only on work it does itself, for long. A
spark-submit's driver (in local mode also the executor) runs with C1 alone
(`-XX:TieredStopAtLevel=1`) when either holds (measured here, bench/NOTES.md):

- the batch is small (at most SMALL_BATCH_OFFSETS planned offsets): its job ends before C2's
  code pays off. A session and two small jobs: 5.0 s against 6.2 s.
- the stage job stages the transform's fast form (onceflow.staging.fast_stage): the records
  are read, parsed and staged in the Python workers, and the JVM hands on Arrow batches and
  the few declined records. 2,000,000 order records: process in-job 10-17 % faster, the
  JVM's CPU 14 s against 6.5 s; the bench's read_parse 18 % faster.

A job whose records go through the transform in the JVM keeps C2 (the same 2,000,000
records without the fast form: 7-12 % slower with C1 alone). A JIT setting of the pipeline's
own spark_conf is never overridden.
"""

from __future__ import annotations

from onceflow.spark.jvm_archive import DRIVER_JAVA_OPTIONS

SMALL_BATCH_OFFSETS = 50_000
C1_ONLY = "-XX:TieredStopAtLevel=1"


def for_job(conf: dict[str, str], offsets: int | None, fast_form: bool) -> dict[str, str]:
    """`conf` for the driver of a batch of `offsets` planned offsets (None: not known) whose
    stage job stages the transform's fast form or not (`fast_form`)."""
    current = conf.get(DRIVER_JAVA_OPTIONS, "")
    small = offsets is not None and offsets <= SMALL_BATCH_OFFSETS
    if not (small or fast_form) or "Tiered" in current:
        return dict(conf)
    return {**conf, DRIVER_JAVA_OPTIONS: f"{current} {C1_ONLY}".strip()}
