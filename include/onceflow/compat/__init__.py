"""What Onceflow needs of the platform it is installed on, in one place:

- python: what Python 3.11 has and 3.10 lacks (tomllib, StrEnum);
- versions: the Airflow and pyspark releases this Onceflow supports, checked at import;
- airflow_exceptions: Airflow's task exceptions, from where the installed release keeps them.
"""
