"""``dispatch.index_put_keys``: the keys ``IndexService#buildIndex`` puts per record, by version.
Up to 5.3.3 UNIQ_KEY then the KEYS tokens; from 5.4.0 also ``topic#T#TAGS`` after them, for a
non-empty TAGS, ROLLBACK records putting nothing (F§7.4)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from store_reader.formats import recordformat as rf
from store_reader.broker import versions
from store_reader.broker.dispatch import index_key_counts, index_put_keys
from store_reader.formats.javahash import index_key, index_key_hash
from store_reader.broker.dispatch import index_puts

NOT, PREPARED, COMMIT, ROLLBACK = (rf.TRANSACTION_NOT_TYPE, rf.TRANSACTION_PREPARED_TYPE,
                                   rf.TRANSACTION_COMMIT_TYPE, rf.TRANSACTION_ROLLBACK_TYPE)
# (topic, sys_flag, UNIQ_KEY, KEYS tokens, TAGS)
ROWS = [
    ("TopicA", NOT, "U1", ["k1", "k2"], "TagA"),
    ("TopicA", NOT, None, [], "TagB"),               # a tag alone: a key on 5.4+ only
    ("TopicB", ROLLBACK, "U3", ["k3"], "TagC"),      # nothing, whatever the version
    ("TopicB", PREPARED, "U4", [], ""),              # empty TAGS: no tag key
    ("TopicB", COMMIT, None, ["k5"], None),          # no TAGS property
    ("TopicÄ", NOT, "U6", [], "T ä"),                # non-ASCII topic and tag
    ("TopicC", NOT, None, [], None),                 # no key at all
]


def _batch() -> pa.RecordBatch:
    topic, sys_flag, uniq, keys, tags = zip(*ROWS)
    return pa.record_batch({
        "phy_offset": pa.array(np.arange(len(ROWS)) * 100, pa.int64()),
        "stored_phy_offset": pa.array(np.arange(len(ROWS)) * 100, pa.int64()),
        "store_timestamp": pa.array(np.arange(len(ROWS)) + 1_700_000_000_000, pa.int64()),
        "sys_flag": pa.array(sys_flag, pa.int32()), "topic": pa.array(topic, pa.string()),
        "uniq_key": pa.array(uniq, pa.string()), "key_list": pa.array(keys, pa.list_(pa.string())),
        "tags": pa.array(tags, pa.string())})


def _expected(tag_keys: bool) -> list[tuple[int, str]]:
    out = []
    for row, (topic, sys_flag, uniq, keys, tags) in enumerate(ROWS):
        if sys_flag == ROLLBACK:
            continue
        out += [(row, f"{topic}#{uniq}")] if uniq is not None else []
        out += [(row, f"{topic}#{k}") for k in keys]
        out += [(row, f"{topic}#T#{tags}")] if tag_keys and tags else []
    return out


@pytest.mark.parametrize("version", ["4.9.8", "5.3.3", "5.4.0", "5.5.1"])
def test_index_put_keys_follow_the_version(version):
    tag_keys = versions.index_tag_keys(version)
    assert tag_keys == (version >= "5.4")
    batch = _batch()
    counts, rows, keys = index_put_keys(batch, tag_keys)
    topics = batch.column("topic").to_pylist()
    got = [(r, index_key(topics[r], k)) for r, k in zip(rows.tolist(), keys.to_pylist())]
    want = _expected(tag_keys)
    assert got == want
    assert counts.tolist() == [sum(1 for r, _ in want if r == row) for row in range(len(ROWS))]
    has_uniq, n_keys, has_tag = index_key_counts(batch, tag_keys)
    assert (has_uniq.astype(int) + n_keys + has_tag).tolist() == counts.tolist()
    assert has_tag.tolist() == ([True, True, False, False, False, True, False] if tag_keys else [False] * len(ROWS))
    # the hashes the index files hold: Java's String#hashCode of topic#T#tags for the tag key
    p = index_puts(batch, tag_keys, ordered=True)
    assert p.key_hash.tolist() == [index_key_hash(k) for _, k in want]
    assert p.phy.tolist() == [r * 100 for r, _ in want]


def test_no_tag_column_needed_before_5_4():
    batch = _batch().drop_columns(["tags"])
    counts, _, keys = index_put_keys(batch, False)
    assert keys.to_pylist()[:3] == ["U1", "k1", "k2"] and int(counts.sum()) == len(_expected(False))
