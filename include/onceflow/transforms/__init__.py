"""Transforms: one module per `transform` name of a pipeline, each with `transform(df) -> df`.

A transform maps the rows of the `onceflow_ranges` source (topic, partition, offset, key,
value, timestamp) to its sink's stage columns, one output row per input row: a record that
cannot be used becomes a dead letter (error set), never a missing row, so records read =
rows staged + dead letters. It must be deterministic and must not shuffle (part k of the
stage holds exactly the records of input partition k).
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
