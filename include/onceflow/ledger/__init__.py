"""The ledger in PostgreSQL, one module per concept of the protocol (docs/PROTOCOL.md).

The ground floor: it imports nothing of Onceflow but the errors, the offset ranges and the
platform's compat. What it asks of a pipeline, a sink or a registry format is a protocol
(contracts); every statement on the `onceflow` schema's tables is one of its modules'.

- states: a batch's states and the steps between them;
- txids: what a txid is (its DAG run's run id);
- attempt: the identity an attempt's output carries from process to publish;
- batches: a txid's batch as recorded (seq, state, ranges), read back;
- transitions: every change of a batch's state, refused unless onceflow.ledger.states allows it;
- planning: plan, the txid's ranges recorded once and replayed on every retry;
- log_checks: whether each partition's log is the one the ledger read (log_identity), from
  the records it read (range_digest);
- fencing: process attempts, only the newest of which may stage; what may still publish;
- stage_parts: the part fence's rows, one per part an attempt staged;
- reader_schemas: a registry format's schemas each txid reads with (registered_schema);
- ordering: the batch commits wait for, and the commit lock;
- offsets: the compare-and-set that applies each range exactly once;
- resets: the operator's new epoch after the broker lost its log.

The commit that ties them together is onceflow.commit. Every rule is enforced inside
database transactions, so it holds whichever Airflow worker, Spark driver or zombie runs it.
"""
