"""How long each Kafka client of Onceflow waits, and when it asks again: every such setting
in one place, with why it outlasts a leader's move (docs/operating.md, "Brokers down").

When a broker dies, the controllers fence it once its heartbeats stop for
broker.session.timeout.ms (Apache Kafka's default: 9 s) and elect another in-sync replica to
lead each of its partitions. Meanwhile its clients meet refused connections or
NOT_LEADER_OR_FOLLOWER; librdkafka and kafka-python refresh their metadata and retry such
errors by themselves until their request's own deadline. A new leader may for a moment
answer a high watermark behind its predecessor's. A controlled shutdown (a rolling restart)
moves leaders at once. Each wait below outlasts a failover, so a moving leader costs a task
seconds, not a failure:

| client | waits | then |
| --- | --- | --- |
| plan's access check | ACCESS_TIMEOUT_S for any broker to answer | KafkaUnreachableError, retried |
| plan's offsets and metadata (kafka-python) | PLAN_REQUEST_TIMEOUT_MS a request | the task's retry |
| plan's log checks (the records compared) | PRINT_TIMEOUT_S | the task's retry, nothing planned |
| plan: an end behind the ledger | asked again after each of ledger.planning.RECHECK_PAUSES_S (1, 2, 4 s) | OffsetRegressionError |
| the range reader inside Spark | RANGE_TIMEOUT_S without progress; EOF_GRACE_S at an end below a range's until | RangeReadError, the task's retry |
| the on_records watcher | WATCH_REQUEST_TIMEOUT_MS a request | the next poke |
| the Kafka-topic sink's producer | SINK_TIMEOUT_S for metadata, delivery and each transaction step; the broker aborts a transaction open SINK_TRANSACTION_TIMEOUT_MS | the commit task's retry |
"""

from __future__ import annotations

ACCESS_TIMEOUT_S = 10.0
PLAN_REQUEST_TIMEOUT_MS = 30_000
PRINT_TIMEOUT_S = 30.0
RANGE_TIMEOUT_S = 60.0
EOF_GRACE_S = 5.0
WATCH_REQUEST_TIMEOUT_MS = 15_000
# The watcher's topics and partitions are looked up again this often (or while a topic is
# missing); a leader's move reaches it through its client's own metadata refresh.
WATCH_METADATA_EVERY_S = 60.0
SINK_TIMEOUT_S = 30.0
# Long enough for a large batch; a crashed committer's open transaction holds read_committed
# consumers back at most this long (the commit's retry aborts it sooner: its
# init_transactions fences the crashed producer).
SINK_TRANSACTION_TIMEOUT_MS = 300_000
