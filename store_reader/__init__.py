"""Spark-free library that knows the bytes of a RocketMQ broker store.

Entry point: ``open_store(path, broker_config)``; see docs/development.md for the API. Never imports pyspark
(except ``datasource``, which ``register`` imports only when called).
"""
from typing import Any

from store_reader.formats.brokerconf import BrokerConfig, load_broker_config
from store_reader.formats.commitlog import SegmentScan, SegmentSummary, scan_segment
from store_reader.exceptions import StoreReaderError
from store_reader.formats.recordformat import ScanOptions
from store_reader.store import Store, open_store


def register(spark: Any, filter_pushdown: bool = True) -> None:
    """Register the ``rocketmq`` Spark data source (``datasource.register``; imports pyspark)."""
    from store_reader.datasource import register as register_datasource

    register_datasource(spark, filter_pushdown=filter_pushdown)


__all__ = ["BrokerConfig", "load_broker_config", "SegmentScan", "SegmentSummary", "scan_segment",
           "StoreReaderError", "ScanOptions", "Store", "open_store", "register"]
