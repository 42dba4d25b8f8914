# Spark image of the distributed deployment (master and worker): the official apache/spark image
# plus a Python for the executors with Onceflow's wheel. Built by docker-compose.yaml (context:
# the repository; `make wheel` first).
#
# Why a Dockerfile rather than `pip install` when the container starts: the executors' Python
# packages (confluent-kafka, pyarrow, psycopg2-binary, ...) are then fixed at build time, a
# restart needs no network, and every worker replica gets the same versions.
#
# SPARK_VERSION must equal the pyspark pin of the Airflow image (the Spark driver runs there, in
# client mode: PySpark cannot run Python applications in cluster mode on a standalone cluster).
ARG SPARK_VERSION=4.2.0
FROM apache/spark:${SPARK_VERSION}-scala2.13-java17-python3-ubuntu

USER root
# The official image is Ubuntu 22.04 with Python 3.10, but PySpark refuses executors whose
# Python minor version differs from the driver's (3.11, the Airflow image). Ubuntu 22.04 has
# python3.11 in its universe component; the deadsnakes PPA is the fallback where it is missing.
RUN set -eux; \
    apt-get update; \
    if ! apt-get install -y --no-install-recommends python3.11 python3.11-venv; then \
        apt-get install -y --no-install-recommends software-properties-common; \
        add-apt-repository -y ppa:deadsnakes/ppa; \
        apt-get update; \
        apt-get install -y --no-install-recommends python3.11 python3.11-venv; \
    fi; \
    apt-get clean; \
    rm -rf /var/lib/apt/lists/*

COPY docker/spark-requirements.txt /tmp/spark-requirements.txt
COPY dist/ /tmp/onceflow-dist/
# The executors' Python: what the reader and the stage import, and Onceflow itself (the same
# wheel as the Airflow image; --no-deps: PySpark is the image's own, Airflow is not needed here).
RUN set -eux; \
    python3.11 -m venv /opt/onceflow/venv; \
    /opt/onceflow/venv/bin/pip install --no-cache-dir --upgrade pip; \
    /opt/onceflow/venv/bin/pip install --no-cache-dir -r /tmp/spark-requirements.txt; \
    /opt/onceflow/venv/bin/pip install --no-cache-dir --no-deps /tmp/onceflow-dist/onceflow-*.whl; \
    /opt/onceflow/venv/bin/python -c 'import confluent_kafka, kafka, pyarrow, pandas, psycopg2, onceflow.reader'
# A DAG that passes its own sys.executable (/usr/local/bin/python in the Airflow image) as
# spark.pyspark.python still finds Python 3.11 with these packages here. A wrapper, not a
# symlink: a symlinked venv interpreter would not find its pyvenv.cfg.
RUN set -eux; \
    printf '#!/bin/sh\nexec /opt/onceflow/venv/bin/python "$@"\n' > /usr/local/bin/python; \
    chmod 755 /usr/local/bin/python

COPY docker/spark-healthcheck.py /opt/onceflow/spark-healthcheck.py

ENV PYSPARK_PYTHON=/opt/onceflow/venv/bin/python

USER spark
