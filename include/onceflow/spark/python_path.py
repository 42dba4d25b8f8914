"""Spark's Python path without the copies of an installed pyspark.

Spark puts `$SPARK_HOME/python/lib/pyspark.zip`, py4j's source zip and spark-core's jar at
the head of the Python path of its driver and of its Python workers (PythonUtils'
sparkPythonPath). Where pyspark is installed with pip, SPARK_HOME is that package's own
folder, and the zip holds the package's files again, so every Python of a job imports
pyspark from the zip:

- a zip holds no bytecode: each process compiles the pyspark it imports from source (its
  driver, its workers' daemon);
- pyspark's worker calls `importlib.invalidate_caches()` before each task
  (worker_util.setup_spark_files), which a zipimporter answers by reading its whole zip's
  directory again, once per package imported from the zip: 0.20-0.24 s of CPU per task here
  (measured in a worker of a spark-submit job, bench/NOTES.md, session 50).

`drop_bundled_copies()` takes out of sys.path the entries that only repeat the installed
pyspark (its zip, py4j's zip when py4j is installed too, and the jars of its own `jars`
folder, which hold no Python), so imports find the installed packages and their bytecode.
A Spark distribution's zips, without an installed pyspark of their own folder, stay. It
must run before anything is imported from the zips: first thing in the process job's driver
and in the workers' daemon (onceflow.spark.spark_daemon).
"""

from __future__ import annotations

import sys
from pathlib import Path


def bundled_copies(path: list[str]) -> list[str]:
    """The entries of `path` that repeat an installed pyspark: `<site>/pyspark/python/lib/`
    pyspark.zip and py4j-*.zip, and `<site>/pyspark/jars/*.jar`, where `<site>` is itself an
    entry of `path` holding pyspark (and py4j, for py4j's zip)."""
    sites = {str(Path(p).resolve()) for p in path if p and not p.endswith((".zip", ".jar"))}
    out = []
    for entry in path:
        p = Path(entry)
        if p.suffix not in (".zip", ".jar"):
            continue
        if p.parent.name == "lib" and p.parent.parent.name == "python":
            home = p.parent.parent.parent  # <site>/pyspark
            if p.name == "pyspark.zip":
                needed = home / "__init__.py"
            elif p.name.startswith("py4j-"):
                needed = home.parent / "py4j" / "__init__.py"
            else:
                continue
        elif p.parent.name == "jars":
            home = p.parent.parent
            needed = home / "__init__.py"
        else:
            continue
        if home.name == "pyspark" and needed.is_file() and str(home.parent.resolve()) in sites:
            out.append(entry)
    return out


def drop_bundled_copies() -> list[str]:
    """Remove bundled_copies(sys.path) from sys.path and their importers from
    sys.path_importer_cache; returns what it removed."""
    dropped = bundled_copies(sys.path)
    for entry in dropped:
        sys.path.remove(entry)
        sys.path_importer_cache.pop(entry, None)
    return dropped
