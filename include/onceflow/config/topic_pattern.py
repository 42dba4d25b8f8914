"""A pipeline's topics by pattern: `topics = { pattern = "shop[.]public[.].*" }` (docs/cdc.md).

The topics a plan reads are those on the broker whose whole name the regular expression
matches when it snapshots the end offsets, Kafka's internal topics (`__` first) left out. A
topic created later is read from the next plan on, from `starting_position`; each txid's
ranges are recorded, so a retry replays the same topics whatever the broker holds by then.
A topic the ledger has read stays the pipeline's: deleted, it stops plan as a listed topic
does."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

INTERNAL_PREFIX = "__"


@dataclass(frozen=True)
class TopicPattern:
    pattern: str

    def names_in(self, on_broker: Iterable[str]) -> list[str]:
        """The topics of `on_broker` the pattern matches, sorted."""
        rx = re.compile(self.pattern)
        return sorted(t for t in on_broker if not t.startswith(INTERNAL_PREFIX) and rx.fullmatch(t))

    def __str__(self) -> str:
        return f"the topics matching /{self.pattern}/"


def parse_topic_pattern(value: object) -> TopicPattern:
    """`{ pattern = "..." }`'s pattern; ValueError saying what is wrong."""
    if not isinstance(value, dict) or set(value) != {"pattern"}:
        raise ValueError(
            'give a list of topic names, or a pattern as { pattern = "shop[.]public[.].*" }'
        )
    pattern = value["pattern"]
    if not isinstance(pattern, str) or not pattern:
        raise ValueError(f"pattern {pattern!r} is not a regular expression")
    try:
        re.compile(pattern)
    except re.error as e:
        raise ValueError(f"pattern {pattern!r} is not a regular expression: {e}") from None
    return TopicPattern(pattern)


def subscription(topics: Iterable[str], pattern: str) -> tuple[str | TopicPattern, ...]:
    """What the broker is asked for: the listed topics, or the pattern (when not "")."""
    return (TopicPattern(pattern),) if pattern else tuple(topics)


def names(topics: Iterable[str | TopicPattern], on_broker: Iterable[str]) -> list[str]:
    """The topic names `topics` selects (each a name, or a pattern matched against
    `on_broker`), each once, in order."""
    on_broker = list(on_broker)
    found: dict[str, None] = {}
    for t in topics:
        for name in t.names_in(on_broker) if isinstance(t, TopicPattern) else (t,):
            found.setdefault(name)
    return list(found)
