"""The process phase: stage the output of one planned txid, as one attempt.

A process task claims a new attempt of the txid in the ledger (fencing every earlier one),
reads exactly the txid's recorded ranges from Kafka, transforms them in Spark and stages the
rows tagged (txid, attempt, part) (onceflow.staging), then records the staged counts and
checksum in the ledger with the records the reader counted: the ledger refuses an attempt
whose rows + dead letters are not the records read (a transform that filtered or added
rows). Commit publishes them later, in seq order. Its modules, one idea each:

    entry           the spark-submit job: its arguments, how the DAG runs it, its exit codes
    attempt_spec    which attempt it is, and the stage job's options: plain values
    attempt         the attempt's bookkeeping in the ledger: claim, log checks, mark staged
    session         the Spark session, the code shipped to executors, the job run in it
    stage_job       the one Spark job that reads, transforms and stages the parts
    poison_records  the stage job again around the records the user's code raised on
    staged_output   the transform's output as its sink stages it
    dead_letters    the records the user's code raised on, as dead-letter rows
    failures        what a failed Spark job means, and the line the ledger keeps of it

onceflow/spark_app/process.py is the application file spark-submit runs (entry.main).
"""
