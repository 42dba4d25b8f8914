"""A Delta Lake table as a pipeline's sink (sink.py: DeltaFormat, a lake sink's table format; one module per part)."""
