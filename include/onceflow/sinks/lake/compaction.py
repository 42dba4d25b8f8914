"""Compaction of a lake table's small files: every micro-batch adds a file per part (and a
rewrite a file per commit), so a table fed once a minute holds thousands of small files by
the end of a day. Compaction reads the live files smaller than half the target size, in
bins of up to the target size (within one partition), writes each bin as one file under
`data/onceflow/<pipeline>/compacted/`, and swaps them in ONE table commit, conditional on
the table as read, that records `onceflow.maintenance` and publishes nothing
(sinks.lake.records): the rows, their coordinates and txids are unchanged, so every rule of
the audit holds before and after, and the table's record of its publications is untouched.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from onceflow.sinks.lake.files import data_root


@dataclass(frozen=True)
class LiveFile:
    uri: str
    size: int  # bytes
    partition: tuple = ()  # the file's partition values (one partition per file)


def bins(files: Sequence[LiveFile], target_bytes: int) -> list[list[LiveFile]]:
    """The small files (under half the target) of each partition in bins of at most the
    target size, smallest first; a bin of one file is left alone."""
    small = sorted((f for f in files if f.size < target_bytes // 2), key=lambda f: f.size)
    by_partition: dict[tuple, list[LiveFile]] = {}
    for f in small:
        by_partition.setdefault(f.partition, []).append(f)
    out: list[list[LiveFile]] = []
    for group in by_partition.values():
        current: list[LiveFile] = []
        total = 0
        for f in group:
            if current and total + f.size > target_bytes:
                out.append(current)
                current, total = [], 0
            current.append(f)
            total += f.size
        out.append(current)
    return [b for b in out if len(b) > 1]


def compacted_dir(location: str, pipeline: str) -> str:
    """Where compacted files (and a re-run's rewrite of them) go: outside any txid's folder,
    since they hold rows of many txids."""
    return f"{data_root(location, pipeline)}/compacted"


def rewrite_bins(
    chosen: list[list[LiveFile]],
    read: Callable[[list[str]], Any],
    write: Callable[[Any], tuple[str, int]],
) -> tuple[list[tuple[str, int]], list[str]]:
    """Each bin's rows read and written as one file: (files added, files removed)."""
    adds, removes = [], []
    for b in chosen:
        uris = [f.uri for f in b]
        adds.append(write(read(uris)))
        removes += uris
    return adds, removes
