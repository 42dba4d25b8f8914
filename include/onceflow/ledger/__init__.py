"""The ledger in PostgreSQL, one module per concept of the protocol (docs/PROTOCOL.md).

- batches: a txid's batch as recorded (seq, state, ranges), read back;
- transitions: every change of a batch's state, refused unless onceflow.states allows it;
- planning: plan, the txid's ranges recorded once and replayed on every retry;
- log_checks: whether each partition's log is the one the ledger read;
- fencing: process attempts, only the newest of which may stage; what may still publish;
- ordering: the batch commits wait for, and the commit lock;
- offsets: the compare-and-set that applies each range exactly once;
- resets: the operator's new epoch after the broker lost its log.

The commit that ties them together is onceflow.commit. Every rule is enforced inside
database transactions, so it holds whichever Airflow worker, Spark driver or zombie runs it.
"""
