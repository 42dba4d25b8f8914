"""ApacheKafka.kill, the chaos harness's broker crash: a broker of its own, killed -9 with a
transaction open, starts again on its log with every acknowledged record, and carries the marker a
stack gives it."""

from __future__ import annotations

import pytest
from onceflow.kafka import broker
from onceflow_dev.apache_kafka import ApacheKafka

pytestmark = pytest.mark.integration


def test_a_killed_broker_restarts_on_its_log_with_every_acknowledged_record(tmp_path):
    import psutil
    from confluent_kafka import Producer
    from sink_support import consume

    kafka = ApacheKafka(tmp_path / "kafka", env={"ONCEFLOW_TEST_MARK": "me"})
    kafka.start()
    try:
        assert psutil.Process(kafka.proc.pid).environ()["ONCEFLOW_TEST_MARK"] == "me"
        broker.create_topic(kafka.bootstrap, "k", 2)
        p = Producer({"bootstrap.servers": kafka.bootstrap, "enable.idempotence": True})
        for i in range(100):
            p.produce("k", str(i).encode(), partition=i % 2)
        assert p.flush(30) == 0
        open_txn = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": "t"})
        open_txn.init_transactions(30)
        open_txn.begin_transaction()
        open_txn.produce("k", b"never", partition=0)
        assert open_txn.flush(30) == 0  # in the log, in a transaction that never commits
        pid = kafka.proc.pid
        kafka.kill()
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"
        kafka.start()
        # read_committed: the open transaction is aborted by its timeout at the latest;
        # every acknowledged record is there, in order
        open_txn = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": "t"})
        open_txn.init_transactions(60)  # fences and aborts the dead one's transaction
        values = sorted(int(v) for _, _, _, v, _ in consume(kafka.bootstrap, "k"))
        assert values == list(range(100))
    finally:
        kafka.stop()
