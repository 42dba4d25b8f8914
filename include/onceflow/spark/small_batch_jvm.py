"""The driver JVM of a small batch's spark-submit: start-up before peak speed.

A JVM's just-in-time compiler spends a short job's first seconds compiling for a peak it
never reaches: with C1 alone (`-XX:TieredStopAtLevel=1`), a spark-submit of a few thousand
records ends about 1.2 s sooner (5.0 s against 6.2 s for a session and two small jobs, with
the class archive of onceflow.spark.jvm_archive; measured here, bench/NOTES.md). A large batch
needs C2: the JVM's side of a 3M-row job ran 2.7 times slower with C1 alone. So the option
is added only to a batch of at most SMALL_BATCH_OFFSETS offsets (what plan planned), and
never over a JIT setting of the pipeline's own spark_conf.
"""

from __future__ import annotations

from onceflow.spark.jvm_archive import DRIVER_JAVA_OPTIONS

SMALL_BATCH_OFFSETS = 50_000
STARTUP_OPTIONS = "-XX:TieredStopAtLevel=1"


def for_batch(conf: dict[str, str], offsets: int | None) -> dict[str, str]:
    """`conf` for a batch of `offsets` planned offsets (None: not known, left as it is)."""
    current = conf.get(DRIVER_JAVA_OPTIONS, "")
    if offsets is None or offsets > SMALL_BATCH_OFFSETS or "Tiered" in current:
        return dict(conf)
    return {**conf, DRIVER_JAVA_OPTIONS: f"{current} {STARTUP_OPTIONS}".strip()}
