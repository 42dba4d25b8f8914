"""The faults a chaos run injects, by a schedule drawn from its seed (schedule):

 1 kill -9 of the spark-submit driver while its Spark tasks stage output
 2 Spark task attempts that fail before and after committing their part (Spark task retry)
 3 a zombie: the Airflow task running process is killed, its driver keeps running; the
   retry's new attempt fences it
 4 the commit task killed inside the commit transaction, and right after the database
   commit; for a sink outside the database (an Iceberg table) also between the sink's
   commit and the ledger's (failpoint commit.after_sink_publish); for a Kafka topic also
   with its Kafka transaction open, records produced (commit.before_sink_commit)
 5 the scheduler and its running tasks killed -9, then restarted
 6 PostgreSQL restarted while a run plans, while a Spark task holds a staging transaction
   open, and while a commit transaction is open
 7 the stack's broker (Apache Kafka) killed -9, in two variants:
   log_kept: restarted on its log, while a Spark task of a run stages (its job's other tasks
     read, its driver asks for the topic ids after the job) or, for a Kafka topic sink, while
     a commit's Kafka transaction is open (records produced, not committed): nothing may be
     lost, no plan may refuse the log; the open transaction commits after the restart (its
     coordinator recovers it from the log, as in the 2026-11-29 run) or a retry's
     init_transactions aborts it;
   log_lost: its log folder deleted before the restart (a lost broker: a new cluster, the
     topic re-created empty): plan must refuse the new log (the topic id is not the
     ledger's: onceflow.ledger.log_identity; or an offset regression) and the harness runs
     `onceflow reset-offsets`. Not for a Kafka topic sink, whose output lives on the same
     broker and would go with it
 8 committed runs cleared and re-run by run id through the API (backfill by run id); an
   append-only sink (a Kafka topic) must refuse it: the run fails in plan saying so, the
   batch and its output stay as they were
 9 a run failing for good while later runs wait in commit (blocked, saying why), then
   retried by clearing it
10 the topic deleted and re-created with its partitions while the broker keeps running and
   runs are in flight, and refilled past every partition's planned offset before the next
   plan (its end offsets then look like the old log's read on): that plan must refuse the
   new log (log identity, not an offset regression) and no run in flight may publish it;
   the harness runs `onceflow reset-offsets` and the new log is processed from its first
   offset
11 (`--process-mode connect`: the pipeline processes in a session of the stack's Spark
   Connect server) the server killed -9 while a task of a job sleeps after committing its
   part, and restarted at once: the attempt fails, a retry replays the range. In that mode
   the driver of faults 1 and 3 is the Airflow task process itself: fault 1 kills it while
   its job's tasks stage on the server; fault 3 kills its supervisor (the executor's
   worker), and the task process runs on, orphaned, as the zombie. The server runs
   local[2], so fault 2's failed task fails the attempt (no Spark task retry) and the
   task's retry replays it.

How each kind is injected: attempts (1 to 4), services (5, 6 and 11), broker_restart (7),
rerun (8), failed_run (9), topic_recreation (10); reset is what follows a new log (7's lost
log, 10): reset-offsets and the new epoch. Each fault is a generator of the steps of
faults.steps, which the harness advances once per loop (Harness.FAULTS, step_fault).
"""
