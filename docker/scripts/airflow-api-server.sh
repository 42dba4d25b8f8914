#!/usr/bin/env bash
# Starts the API server with the admin password from AIRFLOW_ADMIN_PASSWORD. The simple auth
# manager otherwise generates a random password into its passwords file on first start, which
# would change with every new container.
set -euo pipefail

python - <<'PY'
import json
import os

path = os.environ["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"]
users = [u.split(":")[0] for u in os.environ["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"].split(",") if u]
password = os.environ["AIRFLOW_ADMIN_PASSWORD"]
with open(path, "w") as f:
    json.dump({user: password for user in users}, f)
os.chmod(path, 0o600)
PY

exec airflow api-server "$@"
