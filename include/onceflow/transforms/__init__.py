"""Transforms: one module per `transform` name of a pipeline, each with `transform(df) -> df`.

A transform maps the rows of the `onceflow_ranges` source (topic, partition, offset, key,
value, timestamp) to its sink's stage columns, one output row per input row: a record that
cannot be used becomes a dead letter (error set), never a missing row, so records read =
rows staged + dead letters. It must be deterministic and must not shuffle (part k of the
stage holds exactly the records of input partition k).

A transform may also have a fast form: a module `<name>_fast` with
`fast_form(batch) -> (accepted indices, rows)` over the reader's Arrow batches, run in the
reader's Python worker (onceflow.fast_stage). It accepts only records whose rows it computes
exactly as `transform` would; the rest still go through `transform` in the JVM.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any


def get_transform(name: str) -> Callable[[Any], Any]:
    """The `transform` function of the named transform module (see config.TRANSFORMS)."""
    if not name.isidentifier():
        raise ValueError(f"transform name {name!r} is not a module name")
    return import_module(f"onceflow.transforms.{name}").transform


def get_fast_form(name: str) -> Callable[[Any], Any] | None:
    """The named transform's `fast_form` function, or None if it has no `<name>_fast` module."""
    if not name.isidentifier():
        raise ValueError(f"transform name {name!r} is not a module name")
    module = f"onceflow.transforms.{name}_fast"
    try:
        return import_module(module).fast_form
    except ModuleNotFoundError as e:
        if e.name != module:
            raise
        return None
