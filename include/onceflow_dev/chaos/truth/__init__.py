"""What a sink must hold at the end of a chaos run, per sink mode, computed from the records
the broker acknowledged (the harness's own account of the input, independent of the ledger
and the audit) and the sink's tables as read back.

- every mode: dead letters by their coordinates (topic, partition, epoch, offset), their
  stored value the acknowledged one;
- `append`: one row per acknowledged record, by coordinates (`accounting.account`);
  rows + dead letters = acknowledged records; each row's content is the record's;
- `upsert`: the versions table holds one row per published record, accounted like append
  rows (`accounting.account`); the current table holds, per key, the record with the highest
  (seq of the committed txid whose range holds it, partition, offset), none if that is a
  tombstone (`upsert.upsert_truth`);
- `merge`: the partials keep no coordinates, so per committed txid its partial records +
  its dead letters = the acknowledged records in its ranges (`accounting.account_counted`);
  the state is the fold of the committed txids' partials (`merge.merge_truth`); and the fold,
  projected on the key columns the harness can read from the acknowledged values, has the
  records and the aggregate sums of those values (`merge.merge_projection`);
- a Kafka topic (append): its records as a read_committed consumer sees them, accounted like
  append rows by their source coordinates header (`accounting.account`); and the commit log
  holds one marker per committed seq, with its txid and as many records as carry that seq,
  each record headed by the seq whose committed range holds its source record
  (`topic.topic_truth`).

A column is "derivable" from an acknowledged record when the record's value is a JSON object
with a field of the column's name, or, for the single key column of a sink keyed by one
column that no value field names, the Kafka key as text (`compare.derived_fields`): the
harness does not run Spark, so it compares only what it can read from the record itself.
Values compare by the sink column's type (`compare.agrees`).

The lost/duplicated vocabulary is the harness's: lost = an acknowledged record that is not in
the sink though its offset was committed; duplicated = an extra copy, or output that no
acknowledged record explains; lost_with_broker = acknowledged records that a lost broker
(its log deleted) or a deleted topic took with it before they were committed (an earlier
epoch above the offset committed at its reset: shown apart, not a product loss);
unprocessed = lag left when a run ends early.

Its modules, by what they are for:

- records: the values the truth is computed over: an acknowledged record (Acked), a record
  read back from the sink by its coordinates (SinkRecord), a committed range and the index
  that finds the range holding a coordinate;
- compare: what a record says (its derivable columns) and whether a published row or a dead
  letter is the record's;
- accounting: lost and duplicated, by coordinates (`account`) or by counts per committed
  txid (`account_counted`);
- upsert, merge, topic: each the rest of one sink mode's truth.

This `__init__` holds only this overview: it imports nothing, so importing a module of the
package runs nothing else (tests/unit/test_structure.py's rule on package `__init__`s).
"""
