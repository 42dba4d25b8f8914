"""The reference: ONE plain confluent-kafka process reading the exact ranges one after the other
and JSON-decoding every value (json.loads). Also the onceflow range reader alone, in one
process, without Spark. Prints one JSON line: {"records": N, "seconds": S, ...}.

usage: python bench/raw_consumer.py BOOTSTRAP RANGES_JSON [--mode raw|raw-nodecode|reader]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "include"))


def raw(bootstrap: str, ranges: list[dict], decode: bool) -> tuple[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    n = bad = 0
    loads = json.loads
    for r in ranges:
        c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"bench-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "fetch.queue.backoff.ms": 10,
                "fetch.max.bytes": 64 << 20,
                "max.partition.fetch.bytes": 16 << 20,
                "queued.max.messages.kbytes": 65536,
            }
        )
        c.assign([TopicPartition(r["topic"], r["partition"], r["from_offset"])])
        until = r["until_offset"]
        done = False
        while not done:
            for m in c.consume(10_000, 1.0):
                if m.error():
                    continue
                if m.offset() >= until:
                    done = True
                    break
                n += 1
                if decode:
                    try:
                        loads(m.value())
                    except (ValueError, TypeError):
                        bad += 1
                if m.offset() == until - 1:
                    done = True
        c.close()
    return n, bad


def reader(bootstrap: str, ranges: list[dict]) -> tuple[int, int]:
    from onceflow.ranges import OffsetRange
    from onceflow.reader.range_fetch import read_range

    n = 0
    for d in ranges:
        for b in read_range(OffsetRange.from_json(d), bootstrap):
            n += b.num_rows
    return n, 0


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("bootstrap")
    p.add_argument("ranges")
    p.add_argument("--mode", default="raw", choices=("raw", "raw-nodecode", "reader"))
    a = p.parse_args()
    ranges = json.loads(a.ranges)
    t0 = time.perf_counter()
    c0 = time.process_time()
    if a.mode == "reader":
        n, bad = reader(a.bootstrap, ranges)
    else:
        n, bad = raw(a.bootstrap, ranges, a.mode == "raw")
    secs = time.perf_counter() - t0
    print(
        json.dumps(
            {
                "mode": a.mode,
                "records": n,
                "undecodable": bad,
                "seconds": secs,
                "cpu_seconds": time.process_time() - c0,
                "records_per_s": n / secs,
            }
        )
    )


if __name__ == "__main__":
    main()
