"""Where a lake table's staged data files live, whatever the table format (Iceberg, Delta):
process stages them (onceflow.staging.file_stage) as Parquet files under the table's
location at `data/onceflow/<pipeline>/txid=<txid, path-safe>-<hash>/attempt=<n>/`.

A publish adds exactly the staged attempt's files to the table; a re-run's also removes the
txid's live files (found by their folder). Files of attempts that never publish (fenced,
failed, replaced) are found here by their folders and removed (onceflow.staging.file_cleanup).
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Iterable

from onceflow.sinks.lake.storage import Storage
from onceflow.sinks.outside import StagedFiles


def txid_dir(txid: str) -> str:
    """The folder of a txid's data files: path-safe, and unique by a hash of the txid."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", txid)[:80]
    return f"txid={slug}-{hashlib.sha256(txid.encode()).hexdigest()[:12]}"


def data_root(location: str, pipeline: str) -> str:
    """The folder of the pipeline's data files under the table's location."""
    return f"{location.rstrip('/')}/data/onceflow/{pipeline}"


def attempt_dir(location: str, pipeline: str, txid: str, attempt: int) -> str:
    """The folder process writes one attempt's data files to."""
    return f"{data_root(location, pipeline)}/{txid_dir(txid)}/attempt={attempt}"


def txid_prefix(location: str, pipeline: str, txid: str) -> str:
    """What the path of every data file of the txid (any attempt) starts with."""
    return f"{data_root(location, pipeline)}/{txid_dir(txid)}/"


def files_on_storage(
    location: str,
    pipeline: str,
    txids: set[str],
    published: Iterable[tuple[str, int]],
    storage: Storage,
) -> StagedFiles:
    """The Parquet files under the txids' folders (`<txid>/attempt=<n>/`), and `published`:
    the (txid, attempt) pairs a commit of the table records."""
    from pyarrow import fs

    root = data_root(location, pipeline)
    by_dir = {txid_dir(t): t for t in txids}
    # one txid (a commit's): its own folder; more (the cleanup command): the whole root
    top = f"{root}/{txid_dir(next(iter(txids)))}" if len(txids) == 1 else root
    filesystem, path = storage.filesystem(top)
    base = storage.filesystem(root)[1]  # the root as the file system names it
    files: dict[tuple[str, int], list[str]] = {}
    selector = fs.FileSelector(path, recursive=True, allow_not_found=True)
    for info in filesystem.get_file_info(selector):
        parts = info.path[len(base) :].strip("/").split("/")
        if info.type != fs.FileType.File or len(parts) != 3 or parts[0] not in by_dir:
            continue
        m = re.fullmatch(r"attempt=(\d+)", parts[1])
        if m:
            key = (by_dir[parts[0]], int(m.group(1)))
            files.setdefault(key, []).append(f"{root}/{'/'.join(parts)}")
    return StagedFiles(files, set(published))


def delete_files(paths: list[str], storage: Storage) -> None:
    """Delete the files, then their attempt folders if left empty."""
    from pyarrow import fs

    for uri in paths:
        filesystem, path = storage.filesystem(uri)
        with contextlib.suppress(FileNotFoundError):
            filesystem.delete_file(path)
    for uri in {p.rsplit("/", 1)[0] for p in paths}:
        filesystem, folder = storage.filesystem(uri)
        selector = fs.FileSelector(folder, allow_not_found=True)
        if not filesystem.get_file_info(selector):  # a zombie's later file stays
            with contextlib.suppress(OSError):
                filesystem.delete_dir(folder)
