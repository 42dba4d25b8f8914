"""Docker healthcheck of the Spark standalone services, from the master's JSON status page.

`master`: the master is up and ALIVE (not STANDBY or RECOVERING).
`worker`: at least one worker is registered and ALIVE, so a submitted job gets executors.
Exit 0 when healthy, 1 otherwise. Standard library only (runs in the image's venv Python).
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request

MASTER_STATUS_URL = os.environ.get("SPARK_MASTER_STATUS_URL", "http://spark-master:8080/json/")


def main(role: str) -> int:
    try:
        with urllib.request.urlopen(MASTER_STATUS_URL, timeout=5) as response:
            status = json.load(response)
    except (OSError, ValueError) as exc:
        print(f"spark master status unavailable: {exc}", file=sys.stderr)
        return 1
    if status.get("status") != "ALIVE":
        print(f"spark master status: {status.get('status')!r}", file=sys.stderr)
        return 1
    if role == "worker":
        alive = [w for w in status.get("workers", []) if w.get("state") == "ALIVE"]
        if not alive:
            print("no ALIVE worker registered with the master", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in ("master", "worker"):
        print("usage: spark-healthcheck.py master|worker", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
