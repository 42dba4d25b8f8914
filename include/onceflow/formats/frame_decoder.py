"""The decoded frame of a txid: its values' decoder and its keys' (formats.decoder), either
of which may be absent (bytes), into one Arrow batch per reader batch (formats.decoded_batch).

A decoded key's fields are columns `key_<field>` (a key schema that is not a record, e.g. an
Avro string, is the one column `key_decoded`); a record whose key or value does not decode
has every decoded column null and its `error` says which and why.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from onceflow.errors import ConfigError
from onceflow.formats.columns import Column
from onceflow.formats.decoded_batch import decoded_batch, frame_schema, null_at
from onceflow.formats.decoder import RegistryDecoder

KEY_PREFIX = "key_"
#: the one column of a key schema that is not a record, before its prefix
SINGLE_KEY = "decoded"


@dataclass
class FrameDecoder:
    """Picklable: what the reader's workers run (onceflow.reader.frame.RangeReadFn)."""

    value: RegistryDecoder | None
    key: RegistryDecoder | None = None
    columns: tuple[Column, ...] = field(init=False)

    def __post_init__(self) -> None:
        keys = tuple(replace(c, name=KEY_PREFIX + c.name) for c in self._key_columns())
        values = self.value.columns if self.value is not None else ()
        clash = sorted({c.name for c in keys} & {c.name for c in values})
        if clash:
            raise ConfigError(
                f"the key schema's field(s) become column(s) {clash}, which the value schema "
                "has too: rename one of them"
            )
        self.columns = (*keys, *values)

    def _key_columns(self) -> tuple[Column, ...]:
        return self.key.columns if self.key is not None else ()

    @property
    def decoders(self) -> tuple[RegistryDecoder, ...]:
        return tuple(d for d in (self.value, self.key) if d is not None)

    @property
    def spark_schema(self) -> str:
        return frame_schema(self.columns)

    def decode(self, batch: Any, ids: set[int]) -> Any:
        """The decoded frame's batch of a reader batch; adds the writer schema ids of the
        records it decoded to `ids`."""
        names = batch.schema.names
        n = batch.num_rows
        errors: list[str | None] = [None] * n
        parts, roles = [], []
        for decoder, role in ((self.key, "key"), (self.value, "value")):
            if decoder is None:
                continue
            columns, why = decoder.column_values(batch.column(names.index(role)), ids, role)
            errors = [e or w for e, w in zip(errors, why, strict=True)]
            parts += columns
            roles += [role] * len(decoder.columns)
        dead = [i for i, e in enumerate(errors) if e is not None]
        if dead:  # a record that does not decode is a dead letter: no column of it
            parts = [null_at(column, dead) for column in parts]
        return decoded_batch(batch, self.columns, parts, errors, roles)
