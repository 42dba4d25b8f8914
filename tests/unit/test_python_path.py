"""Spark's zips that repeat an installed pyspark leave the Python path; a Spark
distribution's stay (onceflow.spark.python_path)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from onceflow.spark.python_path import bundled_copies

pytestmark = pytest.mark.unit


def installed(site: Path, py4j: bool = True) -> tuple[str, str, str]:
    """A pip-installed pyspark's layout under `site`: its zips and a jar of its own."""
    home = site / "pyspark"
    (home / "python" / "lib").mkdir(parents=True)
    (home / "jars").mkdir()
    (home / "__init__.py").write_text("")
    if py4j:
        (site / "py4j").mkdir()
        (site / "py4j" / "__init__.py").write_text("")
    zips = (
        home / "python" / "lib" / "pyspark.zip",
        home / "python" / "lib" / "py4j-0.10.9.9-src.zip",
        home / "jars" / "spark-core_2.13-4.2.0.jar",
    )
    for z in zips:
        z.write_bytes(b"")
    return tuple(str(z) for z in zips)


def test_an_installed_pysparks_zips_and_jar_are_copies(tmp_path):
    site = tmp_path / "site-packages"
    pyspark_zip, py4j_zip, jar = installed(site)
    path = [pyspark_zip, py4j_zip, jar, "/usr/lib/python311.zip", str(site)]
    assert bundled_copies(path) == [pyspark_zip, py4j_zip, jar]


def test_without_py4j_installed_its_zip_stays(tmp_path):
    site = tmp_path / "site-packages"
    pyspark_zip, py4j_zip, jar = installed(site, py4j=False)
    assert bundled_copies([pyspark_zip, py4j_zip, jar, str(site)]) == [pyspark_zip, jar]


def test_a_distributions_zips_stay_when_its_folder_is_not_on_the_path(tmp_path):
    # SPARK_HOME=/opt/spark: python/lib/pyspark.zip with no installed package on the path
    site = tmp_path / "opt"
    pyspark_zip, py4j_zip, jar = installed(site)
    assert bundled_copies([pyspark_zip, py4j_zip, jar, "/elsewhere"]) == []
    spark_home = tmp_path / "spark"
    (spark_home / "python" / "lib").mkdir(parents=True)
    dist_zip = spark_home / "python" / "lib" / "pyspark.zip"
    dist_zip.write_bytes(b"")
    assert bundled_copies([str(dist_zip), str(tmp_path)]) == []


def test_a_process_imports_the_installed_pyspark_and_no_zip_is_left():
    """The real thing: this venv's pyspark, its zips first on PYTHONPATH as Spark puts them."""
    import pyspark

    home = Path(pyspark.__file__).parent
    zips = [
        str(home / "python" / "lib" / "pyspark.zip"),
        *map(str, (home / "python" / "lib").glob("py4j-*.zip")),
    ]
    code = textwrap.dedent(
        """
        import sys
        from onceflow.spark.python_path import drop_bundled_copies
        drop_bundled_copies()
        import pyspark, py4j
        print(pyspark.__file__, py4j.__file__)
        print([k for k in sys.path_importer_cache if k.endswith(".zip")])
        """
    )
    src = str(Path(__file__).resolve().parents[2] / "include")
    env = {"PYTHONPATH": ":".join([*zips, src]), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out[0].split() == [
        str(home / "__init__.py"),
        str(home.parent / "py4j" / "__init__.py"),
    ]
    assert "pyspark.zip" not in out[1]
