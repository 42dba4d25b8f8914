#!/usr/bin/env bash
# One-shot setup that the other Airflow components wait for (service airflow-init). Idempotent:
# safe to run on every `up`.
set -euo pipefail

echo "== Airflow metadata database"
airflow db migrate

echo "== Onceflow ledger schema (the onceflow_ledger connection)"
onceflow --ledger-conn onceflow_ledger migrate

# Connections are AIRFLOW_CONN_* variables, identical in every Airflow container (nothing to
# store in the database). Fail here, before anything runs, if spark_default does not resolve.
echo "== Connections"
python - <<'PY'
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

conn = SparkSubmitHook(conn_id="spark_default")._connection
print("spark_default:", conn["master"], "deploy-mode", conn["deploy_mode"], conn["spark_binary"])
if not conn["master"].startswith("spark://"):
    raise SystemExit("spark_default must point at the standalone master (spark://...)")
PY

echo "== Tools"
java -version 2>&1 | head -n 1
spark-submit --version 2>&1 | grep -m 1 -i "version"
echo "airflow-init done"
