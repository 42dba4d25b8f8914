"""Python code shipped to the executors: the files process adds with SparkContext.addPyFile.

Executors import onceflow (the reader, the stage writer) and, when they unpickle a
transform's Python UDFs or run its fast form (onceflow.staging.fast_stage), the transform's
module. In local mode the Python workers run on the driver's host with its environment (the
DAG puts the user's folders, the spark_jobs folder first, on their PYTHONPATH:
spark.executorEnv.PYTHONPATH). On any other master (standalone, YARN, Kubernetes,
local-cluster) and on a Spark Connect server (process_mode = "connect") executors may run on
hosts without the user's code: the transform's module is shipped, as its file, or as a zip
of its top-level package when it is in a package, and so is every other module of the
user's folders (config.transform_path) that importing it imported (a helper module next
to it). onceflow itself is shipped only when asked
(--ship-package): executors need the packages of requirements.lock installed anyway, and
onceflow with them; the user's code changes with every pipeline and is installed nowhere.
"""

from __future__ import annotations

import os
import re
import sys
import zipfile
from pathlib import Path
from types import ModuleType

from onceflow.errors import TransformError
from onceflow.transforms import load_transform

# local, local[4], local[*], local[4,2]: executor threads in the driver's JVM (not
# local-cluster[...], whose executors are separate processes)
_LOCAL_MASTER = re.compile(r"local(\[[^\]]*\])?")


def ships_user_code(master: str, ship_package: bool) -> bool:
    """Whether process ships the user transform's module: on a master that is not local,
    or when --ship-package asks for every file."""
    return ship_package or _LOCAL_MASTER.fullmatch(master) is None


def py_files(transform: str, master: str, ship_package: bool, folder: Path) -> list[str]:
    """The files for addPyFile: onceflow zipped (with ship_package) and the user transform's
    module (see ships_user_code); zips are written into `folder`, which must outlive the
    Spark session (the driver serves the files from there)."""
    import onceflow

    files = [package_zip(onceflow, folder)] if ship_package else []
    if transform and ships_user_code(master, ship_package):
        load_transform(transform)  # imports its module, from the spark_jobs folder too
        own = transform.partition(":")[0].partition(".")[0]
        for top in [own, *sorted(_user_modules() - {own})]:
            files.append(module_file(sys.modules[top], folder))
    return files


def _user_modules() -> set[str]:
    """The top-level modules imported from the user's folders (config.transform_path), as
    named or with their links resolved."""
    from onceflow.config.transform_path import transform_path

    paths = transform_path()
    folders = {str(p) for p in paths} | {os.path.realpath(p) for p in paths}
    prefixes = tuple(f.rstrip("/") + "/" for f in folders)
    return {
        name.partition(".")[0]
        for name, real in _module_files().items()
        if real.startswith(prefixes) and name.partition(".")[0] in sys.modules
    }


# What resolve_module_files saw: each module's name, and the real path of its file when it
# has one. A task process holds thousands of modules (Airflow's, pyspark's) in a few hundred
# folders. Resolving them took 50 ms of every connect-mode attempt here, and even reading
# their `__file__` took 20 ms in a forked task process: each module touched copies a memory
# page it shares with the process it was forked from. So a process that forks task processes
# resolves its own modules once (resolve_module_files, from onceflow.airflow.preload), and
# each task process then reads only the modules imported since.
_seen: frozenset[str] = frozenset()
_seen_files: dict[str, str] = {}


def _module_files() -> dict[str, str]:
    """Each module of sys.modules that has a file: its name -> the real path of its file.
    Modules resolve_module_files saw are as it resolved them; each other module's path is
    resolved through its folder's real path, once per folder, then its own link."""
    out = dict(_seen_files)
    real_folders: dict[str, str] = {}
    for name in sys.modules.keys() - _seen:
        path = getattr(sys.modules.get(name), "__file__", None)
        if not isinstance(path, str):
            continue
        folder, file = os.path.split(os.path.abspath(path))
        if folder not in real_folders:
            real_folders[folder] = os.path.realpath(folder)
        real = os.path.join(real_folders[folder], file)
        out[name] = os.path.realpath(real) if os.path.islink(real) else real
    return out


def resolve_module_files() -> None:
    """Resolve the files of the modules imported so far, for the processes this one forks."""
    global _seen, _seen_files
    names = frozenset(sys.modules)
    _seen_files = _module_files()
    _seen = names


def module_file(module: ModuleType, folder: Path) -> str:
    """What executors need to import `module`: its own file when it is a top-level module,
    else a zip of its top-level package (written into `folder`)."""
    top = module.__name__.partition(".")[0]
    if top == module.__name__ and not hasattr(module, "__path__"):
        if not getattr(module, "__file__", None):
            raise TransformError(f"module {module.__name__!r} has no file to ship to the executors")
        return module.__file__
    return package_zip(sys.modules[top], folder)


def package_zip(package: ModuleType, folder: Path) -> str:
    """A zip of `package` with `name/` at its root (no __pycache__), as `folder/name.zip`.
    A namespace package's portions all go into it."""
    name = package.__name__
    path = folder / f"{name}.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for root in map(Path, package.__path__):
            for f in sorted(root.rglob("*")):
                if f.is_file() and "__pycache__" not in f.relative_to(root).parts:
                    z.write(f, Path(name) / f.relative_to(root))
    return str(path)
