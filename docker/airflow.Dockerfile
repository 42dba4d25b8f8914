# Airflow image of the distributed deployment: the official image plus Onceflow's wheel (`make
# wheel` writes dist/onceflow-*.whl), installed as into any Airflow. Built by docker-compose.yaml
# (context: the repository). The DAG folder and the examples' transforms are mounted.
FROM apache/airflow:3.3.2-python3.11

USER root
# spark-submit (the "process" task, client mode: the Spark driver runs in this container) needs a
# JVM; Spark 4 needs Java 17+. /usr/share/man/man1 must exist for the JDK's postinst on -slim.
RUN set -eux; \
    mkdir -p /usr/share/man/man1; \
    apt-get update; \
    apt-get install -y --no-install-recommends openjdk-17-jre-headless; \
    apt-get clean; \
    rm -rf /var/lib/apt/lists/*; \
    java -version
# The Spark Python interpreter has one path in every container (ONCEFLOW_SPARK_PYTHON): here it is
# this image's Python 3.11 (a plain symlink, no venv, so the airflow user's packages are seen); in
# the Spark image it is a Python 3.11 venv. PySpark requires the same Python minor version on the
# driver and on the executors.
RUN set -eux; \
    mkdir -p /opt/onceflow/venv/bin; \
    ln -s /usr/local/bin/python /opt/onceflow/venv/bin/python; \
    /opt/onceflow/venv/bin/python -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version'

COPY docker/scripts/airflow-init.sh docker/scripts/airflow-api-server.sh /opt/onceflow/scripts/
COPY dist/ /tmp/onceflow-dist/

USER airflow
# The wheel pins its dependencies (providers, PySpark, Kafka clients); re-pinning apache-airflow
# keeps pip from up- or downgrading Airflow while resolving them.
RUN pip install --no-cache-dir "apache-airflow==${AIRFLOW_VERSION}" /tmp/onceflow-dist/onceflow-*.whl \
    && python -c "import onceflow.airflow" \
    && spark-submit --version 2>&1 | grep -m1 -i version
