"""What the broker dispatches from a commitlog record (``CommitLogDispatcher``, R§5.3, R§8, F§3.5):
which records get a consume queue entry, which put index keys and which keys, and the LMQ /
multi-dispatch copies of a record's entry. The one statement of these rules: the prediction, the
repair, the audit, ``dump --verify`` and the replica comparison all ask here. A batch of records
becomes its consume queue puts, LMQ copies included, in one place: ``queue_puts``; its index puts
(``IndexService#buildIndex``) in another: ``index_puts``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from store_reader.formats import recordformat as rf
from store_reader.formats.brokerconf import BrokerConfig
from store_reader.formats.indexfile import IndexPuts
from store_reader.formats.javahash import index_key_hashes_of
from store_reader.formats.javalang import java_parse_int, java_split


# The transaction types (SYSFLAG & TRANSACTION_MASK) ``CommitLogDispatcherBuildConsumeQueue`` gives
# a consume queue entry: NOT and COMMIT (a PREPARED or ROLLBACK record gets none, F§3.5).
DISPATCHABLE_TRANSACTION_TYPES = (rf.TRANSACTION_NOT_TYPE, rf.TRANSACTION_COMMIT_TYPE)


def dispatchable(sys_flag: np.ndarray) -> np.ndarray:
    """Records ``CommitLogDispatcherBuildConsumeQueue`` gives a consume queue entry
    (``DISPATCHABLE_TRANSACTION_TYPES``)."""
    tran = np.asarray(sys_flag) & rf.TRANSACTION_MASK
    not_type, commit_type = DISPATCHABLE_TRANSACTION_TYPES
    return (tran == not_type) | (tran == commit_type)


def indexable(sys_flag: np.ndarray) -> np.ndarray:
    """Records ``IndexService#buildIndex`` puts keys for: every transaction type but ROLLBACK
    (F§7.4; a record without UNIQ_KEY and KEYS puts nothing all the same)."""
    return (np.asarray(sys_flag) & rf.TRANSACTION_MASK) != rf.TRANSACTION_ROLLBACK_TYPE


def _column(records: pa.RecordBatch | pa.Table, name: str) -> pa.Array:
    c = records.column(name)
    return c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c


# ``MessageConst.INDEX_TAG_TYPE``: from 5.4.0 ``IndexService#buildIndex`` also puts, after the
# UNIQ_KEY and KEYS tokens, ``topic#T#TAGS`` for a record with a non-empty TAGS property (F§7.4).
INDEX_TAG_TYPE = "T"


def index_key_counts(records: pa.RecordBatch | pa.Table, tag_keys: bool
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per record (columns sys_flag, uniq_key, key_list, and tags with ``tag_keys``): whether
    ``IndexService#buildIndex`` puts its UNIQ_KEY, how many KEYS tokens it puts, and whether it
    puts its tag key (``tag_keys``: a 5.4+ broker, ``INDEX_TAG_TYPE``); nothing for a record
    ``indexable`` leaves out."""
    import pyarrow.compute as pc

    indexed = indexable(_column(records, "sys_flag").to_numpy(zero_copy_only=False))
    has_uniq = pc.is_valid(_column(records, "uniq_key")).to_numpy(zero_copy_only=False) & indexed
    n_keys = np.where(indexed, pc.list_value_length(_column(records, "key_list"))
                      .to_numpy(zero_copy_only=False).astype(np.int64), 0)
    if tag_keys:
        tags = _column(records, "tags")
        has_tag = pc.fill_null(pc.greater(pc.binary_length(tags), 0), False).to_numpy(zero_copy_only=False) & indexed
    else:
        has_tag = np.zeros(len(indexed), dtype=bool)
    return has_uniq, n_keys, has_tag


def index_put_keys(records: pa.RecordBatch | pa.Table, tag_keys: bool) -> tuple[np.ndarray, np.ndarray, pa.Array]:
    """``IndexService#buildIndex`` keys of records in commitlog order, vectorised: the number of
    keys each record puts (``index_key_counts``), then per put (UNIQ_KEY, if any, then the KEYS
    tokens, then ``T#TAGS`` with ``tag_keys``, of each record) its record's row and its key, which
    ``buildKey`` puts behind the record's topic (``javahash.index_key_hashes_of`` hashes
    ``topic#key``)."""
    import pyarrow.compute as pc

    has_uniq, n_keys, has_tag = index_key_counts(records, tag_keys)
    uniq, key_lists = _column(records, "uniq_key").cast(pa.string()), _column(records, "key_list")
    counts = has_uniq.astype(np.int64) + n_keys + has_tag
    total = int(counts.sum())
    if not total:
        return counts, np.zeros(0, np.int64), pa.array([], pa.string())
    uniq_values = uniq.filter(pa.array(has_uniq))
    keep = np.repeat(n_keys > 0, pc.list_value_length(key_lists).to_numpy(zero_copy_only=False)
                     .astype(np.int64))
    tokens_flat = pc.list_flatten(key_lists).cast(pa.string())
    if not keep.all():
        tokens_flat = tokens_flat.filter(pa.array(keep))
    values = [uniq_values, tokens_flat]
    # position of every key in the put order: a record's UNIQ_KEY first, then its tokens, then its tag
    starts = np.cumsum(counts) - counts
    order = np.empty(total, dtype=np.int64)
    order[starts[has_uniq]] = np.arange(len(uniq_values))
    owner = np.repeat(np.arange(len(counts)), n_keys)
    within = np.arange(len(tokens_flat)) - np.repeat(np.cumsum(n_keys) - n_keys, n_keys)
    order[starts[owner] + has_uniq[owner] + within] = len(uniq_values) + np.arange(len(tokens_flat))
    if has_tag.any():
        tag_values = pc.binary_join_element_wise(
            INDEX_TAG_TYPE, _column(records, "tags").cast(pa.string()).filter(pa.array(has_tag)), "#")
        order[starts[has_tag] + counts[has_tag] - 1] = len(uniq_values) + len(tokens_flat) + np.arange(len(tag_values))
        values.append(tag_values)
    tokens = pa.concat_arrays(values).take(pa.array(order))
    return counts, np.repeat(np.arange(len(counts)), counts), tokens


# Columns of a record the index puts are made from (schemas.MESSAGE names).
INDEX_COLUMNS = ["phy_offset", "stored_phy_offset", "store_timestamp", "sys_flag", "topic", "uniq_key",
                 "key_list", "tags"]


def index_puts(records: pa.Table | pa.RecordBatch, tag_keys: bool, ordered: bool = False) -> IndexPuts:
    """``IndexService#buildIndex`` over records (sorted by stored phy offset unless ``ordered``),
    vectorised: every record but a ROLLBACK one puts ``topic#UNIQ_KEY`` then ``topic#token`` for
    each KEYS token, then with ``tag_keys`` (5.4+, ``ScanOptions.index_tags``) ``topic#T#TAGS``."""
    if not ordered:
        records = records.sort_by("stored_phy_offset")
    counts, rows, keys = index_put_keys(records, tag_keys)
    return IndexPuts(index_key_hashes_of(records.column("topic"), rows, keys),
                     np.repeat(records.column("stored_phy_offset").to_numpy(), counts),
                     np.repeat(records.column("store_timestamp").to_numpy(), counts), rows,
                     np.repeat(records.column("phy_offset").to_numpy(), counts))


def multi_dispatch_targets(config: BrokerConfig, broker_5x: bool, topic: str, queue_id: int,
                           properties: dict[str, str] | None) -> list[tuple[str, int, int]]:
    """The LMQ / multi-dispatch copies of a record's CQ entry (R§5.3, E#33): (queue topic,
    queue id, queue offset) from ``INNER_MULTI_DISPATCH`` / ``INNER_MULTI_QUEUE_OFFSET``."""
    if not config.enableMultiDispatch or not properties:
        return []
    names = properties.get(rf.PROPERTY_INNER_MULTI_DISPATCH, "")
    offsets = properties.get(rf.PROPERTY_INNER_MULTI_QUEUE_OFFSET, "")
    if not names.strip() or not offsets.strip():
        return []
    if broker_5x and (topic.startswith(rf.RETRY_GROUP_TOPIC_PREFIX) or topic.startswith(rf.SYSTEM_TOPIC_PREFIX)
                      or topic == rf.SCHEDULE_TOPIC):
        return []
    queue_names, queue_offsets = java_split(names, ","), java_split(offsets, ",")
    if len(queue_names) != len(queue_offsets):
        return []
    out = []
    for name, off in zip(queue_names, queue_offsets):
        if broker_5x and "/" in name:
            continue
        offset = java_parse_int(off, 64)
        if offset is None:      # Long.parseLong throws: the broker logs it and this copy is lost
            continue
        qid = 0 if config.enableLmq and name.startswith("%LMQ%") else queue_id
        out.append((name, qid, offset))
    return out


def multi_dispatch_rows(config: BrokerConfig, broker_5x: bool, records: pa.RecordBatch | pa.Table
                        ) -> list[tuple[int, str, int, int]]:
    """Every LMQ copy of ``records`` (dispatchable ones, with a ``properties`` column): (row, queue
    topic, queue id, queue offset) in row order, a row's copies in property order
    (``multi_dispatch_targets``; only rows carrying INNER_MULTI_DISPATCH are looked at). Used
    through ``queue_puts``."""
    import pyarrow.compute as pc

    props = records.column("properties")
    has = pc.is_valid(pc.map_lookup(props, rf.PROPERTY_INNER_MULTI_DISPATCH, "first"))
    rows = np.flatnonzero(has.to_numpy(zero_copy_only=False))
    out = []
    for r in rows.tolist():
        topic, qid = records.column("topic")[r].as_py(), records.column("queue_id")[r].as_py()
        for name, copy_qid, offset in multi_dispatch_targets(config, broker_5x, topic, qid,
                                                             dict(props[r].as_py() or [])):
            out.append((r, name, copy_qid, offset))
    return out


@dataclass(frozen=True)
class QueuePuts:
    """A batch's consume queue puts (``queue_puts``): the dispatchable records' own puts in row
    order (the first ``own``), then their LMQ copies in row order, a row's in property order."""

    row: np.ndarray             # int64: the record's row in the batch
    topic: np.ndarray           # int64: the queue's topic, as its number in ``topics``
    topics: list[str]           # the put records' topics as they first appear, then the LMQ ones
    queue_id: np.ndarray        # int32
    queue_offset: np.ndarray    # int64
    copy: np.ndarray            # int32: 0 the record's own put, k its k-th LMQ copy
    own: int


def queue_puts(config: BrokerConfig, broker_5x: bool, records: pa.RecordBatch | pa.Table,
               keep: np.ndarray | None = None) -> QueuePuts:
    """The consume queue puts ``CommitLogDispatcherBuildConsumeQueue`` makes of ``records`` (columns
    sys_flag, topic, queue_id, queue_offset; ``properties`` with ``enableMultiDispatch``), of the
    rows where ``keep`` (default all): a put per ``dispatchable`` record, then its LMQ copies
    (``multi_dispatch_rows``). What every reader of the dispatch (the replay, the CQ rebuild, the
    audit, ``dump --verify``) takes a batch's puts from."""
    put = dispatchable(_column(records, "sys_flag").to_numpy(zero_copy_only=False))
    if keep is not None:
        put &= keep
    rows = np.flatnonzero(put)
    topic = _column(records, "topic")
    enc = (topic if len(rows) == len(put) else topic.take(pa.array(rows))).dictionary_encode()
    topics = enc.dictionary.to_pylist()
    code = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    qid = _column(records, "queue_id").to_numpy(zero_copy_only=False)[rows].astype(np.int32)
    offset = _column(records, "queue_offset").to_numpy(zero_copy_only=False)[rows].astype(np.int64)
    copies = [] if not config.enableMultiDispatch or not len(rows) else multi_dispatch_rows(
        config, broker_5x, records.select(["topic", "queue_id", "properties"]).take(pa.array(rows)))
    if not copies:
        return QueuePuts(rows, code, topics, qid, offset, np.zeros(len(rows), np.int32), len(rows))
    number = {name: i for i, name in enumerate(topics)}
    for _, name, _, _ in copies:
        if name not in number:
            number[name] = len(topics)
            topics.append(name)
    at = np.array([c[0] for c in copies], np.int64)
    # k-th copy of its record: the place in its run of equal ``at`` (a record's copies are adjacent)
    i = np.arange(len(at))
    nth = (i - np.maximum.accumulate(np.where(np.r_[True, at[1:] != at[:-1]], i, 0)) + 1).astype(np.int32)
    return QueuePuts(np.concatenate([rows, rows[at]]),
                     np.concatenate([code, np.array([number[c[1]] for c in copies], np.int64)]), topics,
                     np.concatenate([qid, np.array([c[2] for c in copies], np.int32)]),
                     np.concatenate([offset, np.array([c[3] for c in copies], np.int64)]),
                     np.concatenate([np.zeros(len(rows), np.int32), nth]), len(rows))
