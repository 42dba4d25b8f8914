"""The range reader: the records of a txid's planned ranges, read from Kafka in Spark.

Process must see the records plan recorded, never the broker's current end, so the reader
takes the ranges as given and reads each [from_offset, until_offset) with an assigned
consumer (no consumer group, no committed offsets, isolation read_committed): its own, or
one shared by the small ranges of an input partition, each of its own partition. It fails
rather than cut a range short. Its modules, one idea each:

    input_ranges       the fixed input partitions a txid's ranges split into
    range_end          when a range read is complete, and how it fails when it cannot be
    librdkafka_fetch   range reads with librdkafka (confluent_kafka), the default client
    kafka_python_fetch one range read with kafka-python, the pure-Python fallback
    range_fetch        one range read with the chosen client (read_range)
    record_batches     the rows' schema, and the Arrow batches the clients fill
    read_counts        the records read, counted apart from the transform (the ledger's check)
    frame              the ranges as a DataFrame: what process reads
    data_source        the same as the `onceflow_ranges` Spark data source, for ad-hoc use

The Arrow helpers the reader, the stage writer and fast forms share are onceflow.spark.arrow_columns.
"""
