"""An Apache Iceberg table as a pipeline's sink (sink.py: IcebergFormat, a lake sink's table format; one module per part)."""
