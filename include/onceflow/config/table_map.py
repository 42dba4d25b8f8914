"""Which table each topic of a pipeline of change events lands in (a sink's `tables`): by
name, a map of topic to table, or by a template of Debezium's topic name
`<server>.<schema>.<table>` (`{server}`, `{schema}`, `{table}`; the server is all before
the last two parts, since Debezium's topic.prefix may hold dots)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from onceflow.config.names import NAME_RE
from onceflow.errors import ConfigError

_FIELDS = ("server", "schema", "table")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


@dataclass(frozen=True)
class TableMap:
    """`by_topic` (topic, table) pairs, or `template`; exactly one of them."""

    by_topic: tuple[tuple[str, str], ...] = ()
    template: str = ""

    def table_of(self, topic: str) -> str:
        """The table `topic` lands in; ConfigError naming the topic when none."""
        if not self.template:
            found = dict(self.by_topic).get(topic)
            if found is None:
                raise ConfigError(
                    f"topic {topic!r} matches no table mapping: the sink's `tables` names "
                    f"{sorted(dict(self.by_topic))}; map it to a table"
                )
            return found
        parts = topic.split(".")
        if len(parts) < 3:
            raise ConfigError(
                f"topic {topic!r} matches no table mapping: `tables = {self.template!r}` reads "
                "Debezium's topic names <server>.<schema>.<table>; map it to a table by name"
            )
        fields = {"server": ".".join(parts[:-2]), "schema": parts[-2], "table": parts[-1]}
        table = _PLACEHOLDER.sub(lambda m: fields[m.group(1)], self.template)
        if not NAME_RE.fullmatch(table):
            raise ConfigError(
                f"topic {topic!r} gives table {table!r} by `tables = {self.template!r}`, which "
                "is not a valid table name (lower-case letters, digits and underscores, "
                "starting with a letter, at most 40 characters); map the topic to a table by "
                "name"
            )
        return table

    def tables(self, topics: Iterable[str]) -> dict[str, str]:
        """Each topic's table; ConfigError for a topic without one, or two topics sharing one."""
        found: dict[str, str] = {}
        for topic in topics:
            table = self.table_of(topic)
            other = next((t for t, tb in found.items() if tb == table), None)
            if other is not None:
                raise ConfigError(
                    f"topics {other!r} and {topic!r} both land in table {table!r}: give each "
                    "its own"
                )
            found[topic] = table
        return found


def parse_tables(value: object) -> TableMap:
    """A sink's `tables`: a template string or a map of topic to table; ValueError saying
    what is wrong."""
    if isinstance(value, str):
        names = _PLACEHOLDER.findall(value)
        unknown = [n for n in names if n not in _FIELDS]
        if unknown or not names:
            raise ValueError(
                f"{value!r} is not a template of {', '.join('{' + f + '}' for f in _FIELDS)} "
                'such as "{schema}_{table}"'
            )
        return TableMap(template=value)
    if isinstance(value, dict) and value:
        for topic, table in value.items():
            if not isinstance(table, str) or not NAME_RE.fullmatch(table):
                raise ValueError(f"topic {topic!r}: {table!r} is not a valid table name")
        return TableMap(by_topic=tuple(sorted(value.items())))
    raise ValueError(
        'give a template such as "{schema}_{table}", or a table of topic = "table" pairs'
    )
