"""Airflow glue: thin operators and the DAG factory; the logic lives in the ledger."""
