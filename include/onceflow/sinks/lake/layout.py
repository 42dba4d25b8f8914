"""The columns of a lake sink's table, and of the data files process stages for it, by mode
(each mode's object, sinks.lake.modes, picks its layout), whatever the table format (each
format names its own types: `Types`).

- append: the table holds one row per record, the coordinates and txid first, then the
  user's columns; the staged files are the table's data files.
- upsert: the table holds each key's current row: the key, the user's other columns, the
  seq and coordinates of the record it comes from; the staged files are the txid's
  versions: coordinates, txid, the user's columns and `tombstone`.
- merge: the table holds the state: the key, the aggregates (summed: integers widen to
  long, floats to double), `last_seq`; the staged files are the txid's versions of the key
  and aggregate columns, with their coordinates.

The staged files of upsert and merge never join the table: commit reads them to rewrite the
table's rows of the keys they touch (sinks.lake.rewrite), and keeps them as the txid's
versions for later re-runs and the audit (sinks.lake.versions).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from onceflow.config.sink import SinkConfig
from onceflow.errors import SinkSchemaError
from onceflow.sinks import schema_evolution


@dataclass(frozen=True)
class Types:
    """How a table format names the types the layouts add."""

    long: str
    boolean: str
    sums: dict[str, str]  # an aggregate's type -> its sum's (numbers only; decimals kept)
    decimal_prefix: str  # "decimal("


@dataclass(frozen=True)
class LakeColumn:
    name: str
    type: str  # the format's type name
    required: bool = False


@dataclass(frozen=True)
class Layout:
    table: tuple[LakeColumn, ...]  # the table's columns
    files: tuple[LakeColumn, ...]  # the staged data files' columns
    users: tuple[str, ...]  # the user's columns the table holds (schema evolution may add)
    key: tuple[str, ...]  # columns the table cannot add (its key)
    output: tuple[str, ...]  # every user column of the output (what process stages)


def append_layout(
    name: str,
    cfg: SinkConfig,
    fixed: Sequence[tuple[str, str]],
    users: Sequence[tuple[str, str]],
    types: Types,
) -> Layout:
    """The layout of append sink `name` (as messages name it), from the format's fixed
    columns (coordinates and txid) and the output's user columns (name, type)."""
    coords = tuple(LakeColumn(n, t, required=True) for n, t in fixed)
    names = tuple(n for n, _ in users)
    user_cols = tuple(LakeColumn(n, t) for n, t in users)
    return Layout((*coords, *user_cols), (*coords, *user_cols), names, (), names)


def upsert_layout(
    name: str,
    cfg: SinkConfig,
    fixed: Sequence[tuple[str, str]],
    users: Sequence[tuple[str, str]],
    types: Types,
) -> Layout:
    """The layout of upsert sink `name` (append_layout says from what)."""
    coords = tuple(LakeColumn(n, t, required=True) for n, t in fixed)
    by_name = _with_roles(name, cfg, users)
    user_cols = tuple(LakeColumn(n, t) for n, t in users)
    key = tuple(LakeColumn(k, by_name[k]) for k in cfg.key)
    values = tuple(c for c in user_cols if c.name not in cfg.key)
    table = (*key, *values, LakeColumn("seq", types.long, required=True), *coords)
    files = (*coords, *user_cols, LakeColumn("tombstone", types.boolean))
    return Layout(table, files, tuple(by_name), cfg.key, tuple(by_name))


def merge_layout(
    name: str,
    cfg: SinkConfig,
    fixed: Sequence[tuple[str, str]],
    users: Sequence[tuple[str, str]],
    types: Types,
) -> Layout:
    """The layout of merge sink `name` (append_layout says from what)."""
    coords = tuple(LakeColumn(n, t, required=True) for n, t in fixed)
    by_name = _with_roles(name, cfg, users)
    key = tuple(LakeColumn(k, by_name[k]) for k in cfg.key)
    sums = []
    for a in cfg.aggregates:
        t = by_name[a]
        summed = types.sums.get(t) or (t if t.startswith(types.decimal_prefix) else None)
        if summed is None:
            raise SinkSchemaError(
                f"{name}: aggregate column {a!r} is {t}; merge sums it, so give it a number "
                "type (int, bigint, double, decimal)"
            )
        sums.append(LakeColumn(a, summed))
    table = (*key, *sums, LakeColumn("last_seq", types.long, required=True))
    files = (*coords, *key, *(LakeColumn(a, by_name[a]) for a in cfg.aggregates))
    return Layout(table, files, (*cfg.key, *cfg.aggregates), cfg.key, tuple(by_name))


def _with_roles(name: str, cfg: SinkConfig, users: Sequence[tuple[str, str]]) -> dict[str, str]:
    """The output's columns by name, once the sink's key and aggregates are among them."""
    by_name = dict(users)
    for k in (*cfg.key, *cfg.aggregates):
        if k not in by_name:
            role = "key" if k in cfg.key else "aggregate"
            raise SinkSchemaError(
                f"{name}: {role} column {k!r} (sink {role}) is not in the transform's output "
                f"(its columns: {', '.join(by_name) or 'none'}); nothing was staged"
            )
    return by_name


def fit(
    name: str,
    shape: Layout,
    fields: Iterable[tuple[str, str, bool]],
    previous: str | None,
    not_null: str,
) -> schema_evolution.TableFit:
    """An existing lake table as the evolution rule (onceflow.sinks.schema_evolution) sees it:
    `fields` its (name, type, nullable) columns; a not-null column the output makes
    nullable counts as another type (`not_null`, the format's word for it, before the type);
    `previous` the output columns an earlier output gave (the table property; a table made
    by something else has none)."""
    wanted = {c.name: c for c in shape.table}
    have = []
    for column, typ, nullable in fields:
        c = wanted.get(column)
        loosened = not nullable and c is not None and not c.required
        have.append((column, f"{not_null + ' ' if loosened else ''}{typ}", nullable))
    return schema_evolution.TableFit(
        name=name,
        wanted=tuple((c.name, c.type) for c in shape.table),
        have=tuple(have),
        user=frozenset(shape.users),
        key=frozenset(shape.key),
        previous=frozenset(previous.split(",")) if previous else frozenset(),
    )
