"""Staging: process writes an attempt's output into its sink's stage, one part at a time.

Every part is written under ONE part fence (onceflow.staging.fence), which also states how
an attempt's output is numbered into parts. Behind the fence a part goes to one of two
backends, by its sink: rows COPYed into a PostgreSQL stage table, the valid ones into the
attempt's own table for an append sink, or, for a sink outside the database, a data file
per part. Its modules, one idea each:

    fence        the part numbering, the claim that stages a part once, what its row records
    target       where and under which tags a part is staged (StageTarget)
    checksum     the row hash column and the part's exact checksum
    table_stage  the table backend: a part's rows COPYed into the sink's stage table
    file_stage   the file backend: a part's valid rows as one Parquet data file
    attempt_table  the attempt-table backend: a part's valid rows COPYed into the attempt's
                 own table, which commit attaches as a partition (PostgreSQL append)
    epochs       each row's range epoch, for the backends that write published rows
    writer       the stage writer Spark runs: each partition as a part, to its backend
    fast_stage   a transform's fast form staged by the Python worker that reads the range
    task_errors  the fence's and the fast form's refusals, known by type on the driver
"""
