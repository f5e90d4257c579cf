"""A record kind defined once, rendered as a pyarrow schema and as a Spark ``StructType``.

Types are named in a tiny vocabulary so both renderings come from the same line:
``int8 int32 int64 bool string binary timestamp`` (UTC, microseconds), ``list<T>`` and
``map<string,string>``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

import pyarrow as pa

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql.types import DataType, StructType

_ARROW_SCALARS = {
    "int8": pa.int8(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "bool": pa.bool_(),
    "string": pa.string(),
    "binary": pa.binary(),
    "timestamp": pa.timestamp("us", tz="UTC"),
}


def arrow_type(name: str) -> pa.DataType:
    if name.startswith("list<"):
        return pa.list_(arrow_type(name[5:-1]))
    if name.startswith("map<"):
        key, value = name[4:-1].split(",")
        return pa.map_(arrow_type(key), arrow_type(value))
    return _ARROW_SCALARS[name]


def spark_type(name: str) -> "DataType":
    from pyspark.sql import types as T

    scalars = {
        "int8": T.ByteType(), "int32": T.IntegerType(), "int64": T.LongType(),
        "bool": T.BooleanType(), "string": T.StringType(), "binary": T.BinaryType(),
        "timestamp": T.TimestampType(),
    }
    if name.startswith("list<"):
        return T.ArrayType(spark_type(name[5:-1]), containsNull=False)
    if name.startswith("map<"):
        key, value = name[4:-1].split(",")
        return T.MapType(spark_type(key), spark_type(value), valueContainsNull=False)
    return scalars[name]


@dataclass(frozen=True)
class Field:
    name: str
    type: str
    nullable: bool = False
    doc: str = ""

    def to_arrow(self) -> pa.Field:
        t = arrow_type(self.type)
        if self.type.startswith("list<"):
            t = pa.list_(pa.field("item", t.value_type, nullable=False))
        elif self.type.startswith("map<"):
            t = pa.map_(t.key_type, pa.field("value", t.item_type, nullable=False))
        return pa.field(self.name, t, nullable=self.nullable)


@dataclass(frozen=True)
class RecordSchema:
    """An ordered list of fields; ``arrow()``/``spark()`` render it, optionally projected."""

    name: str
    fields: tuple[Field, ...]

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"{self.name} has no column {name!r}")

    def project(self, columns: Iterable[str] | None) -> "RecordSchema":
        """The same schema keeping only ``columns`` (in schema order); None keeps all."""
        if columns is None:
            return self
        wanted = set(columns)
        unknown = wanted - set(self.names)
        if unknown:
            raise KeyError(f"{self.name} has no column(s) {sorted(unknown)}; it has {self.names}")
        return RecordSchema(self.name, tuple(f for f in self.fields if f.name in wanted))

    def arrow(self, columns: Iterable[str] | None = None) -> pa.Schema:
        return pa.schema([f.to_arrow() for f in self.project(columns).fields])

    def spark(self, columns: Iterable[str] | None = None) -> "StructType":
        from pyspark.sql.types import StructField, StructType

        return StructType([StructField(f.name, spark_type(f.type), f.nullable)
                           for f in self.project(columns).fields])

    def ddl(self, columns: Iterable[str] | None = None) -> str:
        """Spark DDL string, for data sources that declare their schema as text."""
        return self.spark(columns).simpleString()[len("struct<"):-1]
