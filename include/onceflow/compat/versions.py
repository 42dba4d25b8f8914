"""Which Airflow and pyspark this Onceflow supports, and the check that the installed ones are
among them. The ranges are the wheel's own requirements (pyproject.toml's `dependencies`, read
from the installed distribution's metadata), so they are stated in one place.

An installer that was told to ignore dependencies, or a pyspark-client that the Spark provider
pulled in at another version than pyspark (both install the same `pyspark` package, so their
files mix), would otherwise fail somewhere deep inside; check_versions says what is wrong in
one line instead. A checkout that is not installed (no metadata) is not checked.
"""

from __future__ import annotations

from functools import cache
from importlib import metadata

from onceflow.errors import UnsupportedVersionError

# the distributions Onceflow checks, and what to call them in a message
CHECKED = {"apache-airflow": "Airflow", "pyspark": "pyspark"}


@cache
def supported() -> dict[str, str]:
    """Distribution -> its supported range (a specifier such as '<4,>=3.1.0'), from the
    installed wheel's requirements; empty when Onceflow is not installed."""
    from packaging.requirements import Requirement

    try:
        requires = metadata.requires("onceflow") or []
    except metadata.PackageNotFoundError:
        return {}
    ranges = {}
    for line in requires:
        req = Requirement(line)
        if req.name in CHECKED and req.marker is None:
            ranges[req.name] = str(req.specifier)
    return ranges


@cache
def _installed(name: str) -> str | None:
    """The installed version (cached, as `supported`: a process runs with the packages it
    imported, and a task process forked from a preloaded one finds both already read)."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def problems(
    installed: dict[str, str | None] | None = None, ranges: dict[str, str] | None = None
) -> list[str]:
    """What is wrong with the installed versions (`installed`: distribution -> version, None
    when absent; default: this environment's), each a sentence."""
    from packaging.specifiers import SpecifierSet

    ranges = supported() if ranges is None else ranges
    if installed is None:
        installed = {n: _installed(n) for n in (*CHECKED, "pyspark-client")}
    found = []
    for name, spec in ranges.items():
        version = installed.get(name)
        if name == "pyspark" and version is None:
            version = installed.get("pyspark-client")  # a Spark Connect client alone
        if version is not None and not SpecifierSet(spec).contains(version, prereleases=True):
            found.append(
                f"{CHECKED[name]} {version} is installed; Onceflow supports {CHECKED[name]} {spec}"
            )
    full, client = installed.get("pyspark"), installed.get("pyspark-client")
    if full and client and full != client:
        found.append(
            f"pyspark {full} and pyspark-client {client} are installed; they share one package "
            f"and must be the same version: pip install 'pyspark-client=={full}'"
        )
    return found


def check_versions() -> None:
    """UnsupportedVersionError naming the first problem (see the module)."""
    found = problems()
    if found:
        raise UnsupportedVersionError(found[0])
