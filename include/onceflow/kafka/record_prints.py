"""The print of a record at an offset (onceflow.ledger.range_digest.RecordPrint): what plan
compares with the ledger's last committed print of each partition, to prove the broker's log
is still the one the ledger read (onceflow.ledger.log_identity)."""

from __future__ import annotations

import time
from collections.abc import Mapping

from kafka import KafkaConsumer, TopicPartition

from onceflow.errors import OnceflowError
from onceflow.kafka.patience import PRINT_TIMEOUT_S
from onceflow.ledger.range_digest import RecordPrint, record_hash

# kafka-python checks each fetched batch's CRC32C in pure Python (without the optional
# crc32c module): 0.24 ms per KiB here, half of the prints' 23 ms a plan at 1,000 records/s
# (py-spy, 2026-12-06), and 0.25 s for one producer batch of 1 MiB. The process step's
# reader, librdkafka, checks none by default (check.crcs). A corrupt record's print would not
# match the ledger's: plan stops at the log's identity check and plans nothing.
CHECK_CRCS = False


def record_prints(
    consumer: KafkaConsumer, pipeline: str, wanted: Mapping[tuple[str, int], int]
) -> dict[tuple[str, int], RecordPrint | None]:
    """Per partition, the print of the first data record at or after the wanted offset,
    None when the partition holds none (only control or aborted records, or nothing, up to
    its end). The end is the high watermark the fetches report, not ListOffsets' answer,
    which a broker may give short (see broker.partition_ends), hiding records that are there."""
    out: dict[tuple[str, int], RecordPrint | None] = {}
    if not wanted:
        return out
    tps = {tp: TopicPartition(*tp) for tp in wanted}
    consumer.assign(list(tps.values()))
    for tp, offset in wanted.items():
        consumer.seek(tps[tp], offset)
    deadline = time.monotonic() + PRINT_TIMEOUT_S
    while len(out) < len(wanted):
        for ktp, recs in consumer.poll(timeout_ms=200, max_records=50).items():
            tp = (ktp.topic, ktp.partition)
            if tp in out:
                continue
            for rec in recs:
                if rec.offset >= wanted[tp]:
                    stamp = None if rec.timestamp is None or rec.timestamp < 0 else rec.timestamp
                    out[tp] = RecordPrint(
                        rec.offset, record_hash(rec.key, rec.value, rec.headers, stamp)
                    )
                    consumer.pause(ktp)
                    break
        for tp, ktp in tps.items():  # past every record up to the end: none there
            high = consumer.highwater(ktp)
            if tp not in out and high is not None and (consumer.position(ktp) or 0) >= high:
                out[tp] = None
        if time.monotonic() > deadline:
            missing = ", ".join(
                f"{t}[{p}] at {wanted[(t, p)]}" for t, p in wanted if (t, p) not in out
            )
            raise OnceflowError(
                f"plan of pipeline {pipeline!r} could not fetch the records it compares with "
                f"the ledger's within {PRINT_TIMEOUT_S:g} s ({missing}): nothing was planned; "
                "the broker may be overloaded, try again"
            )
    return out
