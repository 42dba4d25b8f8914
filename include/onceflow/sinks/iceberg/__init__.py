"""An Apache Iceberg table as a pipeline's sink (sink.py: IcebergSink; one module per part)."""
