"""A Delta Lake table as a pipeline's sink (sink.py: DeltaSink; one module per part)."""
