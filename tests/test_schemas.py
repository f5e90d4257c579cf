"""schemas/: one definition per record kind, rendered identically for Arrow and Spark."""
from __future__ import annotations

import pyarrow as pa
import pytest

import schemas
import support
from store_reader import open_store

ALL = [schemas.MESSAGE, schemas.SEGMENT, schemas.CONSUME_QUEUE_ENTRY, schemas.INDEX_ENTRY,
       schemas.INDEX_HEADER, schemas.CHECKPOINT, schemas.TIMER_UNIT]


@pytest.mark.parametrize("rs", ALL, ids=lambda r: r.name)
def test_arrow_and_spark_agree(rs):
    arrow = rs.arrow()
    spark = rs.spark()
    assert arrow.names == [f.name for f in spark.fields] == rs.names
    assert [f.nullable for f in arrow] == [f.nullable for f in spark.fields]
    assert rs.ddl().startswith(f"{rs.fields[0].name}:")


def test_projection_keeps_schema_order():
    assert schemas.MESSAGE.arrow(["topic", "phy_offset"]).names == ["phy_offset", "topic"]
    with pytest.raises(KeyError, match="no column"):
        schemas.MESSAGE.arrow(["nope"])


@pytest.mark.spark
def test_scanned_batches_load_into_spark_with_the_declared_schema(spark):
    case = (support.VERSIONS[1], "clean")
    store = open_store(support.input_store(*case), support.broker_conf(*case))
    table = pa.Table.from_batches(list(store.scan_commitlog()))
    assert table.schema == schemas.MESSAGE.arrow([n for n in schemas.MESSAGE.names if n != "body"])
    df = spark.createDataFrame(table, schema=schemas.MESSAGE.spark(table.schema.names))
    assert df.count() == table.num_rows == 400
    assert df.where("topic = 'SCHEDULE_TOPIC_XXXX'").count() == \
        sum(1 for t in table["topic"].to_pylist() if t == "SCHEDULE_TOPIC_XXXX")
