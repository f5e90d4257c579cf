"""Java String.hashCode, index keyHash and tags code (spec store-format §7.3, §3.9)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

import support
from store_reader.formats import javahash
from store_reader.formats.javahash import (index_key, index_key_hash, index_key_hashes, index_key_hashes_of,
                                           java_string_hash, java_string_hashes, tags_hash)

pytestmark = pytest.mark.reader

# spec §7.3 test vectors: key, hashCode, keyHash, slot (5,000,000 slots), slot byte position
SPEC_VECTORS = [
    ("TopicTest#k1", 2746024, 2746024, 2746024, 10_984_136),
    ("TopicTest#k2", 2746025, 2746025, 2746025, 10_984_140),
    ("TopicTest#7F0000010B8C18B4AAC2123456780000", 279271131, 279271131, 4271131, 17_084_564),
    ("TopicTest#order-42", -870421153, 870421153, 421153, 1_684_652),
    ("polygenelubricants", -2147483648, 0, 0, 40),  # abs(MIN_VALUE) stays negative in Java -> 0
    ("TopicTest#订单", 3872117, 3872117, 3872117, 15_488_508),
]

# Strings arrow can hold (valid UTF-8: no lone surrogates), including astral characters.
texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)


@pytest.fixture(params=["pure", "native"])
def hash_mode(request, monkeypatch):
    """Run vectorised tests on both paths (the native one only where the extension is built)."""
    if request.param == "pure":
        monkeypatch.setenv("STORE_READER_PURE", "1")
    else:
        monkeypatch.delenv("STORE_READER_PURE", raising=False)
        # the package build always compiles the scanner: its absence is a failure, not a skip
        assert javahash.native_available(), "store_reader._native.java_hashes is not built"
    return request.param


@pytest.mark.parametrize("key, hash_code, key_hash, slot, slot_pos", SPEC_VECTORS)
def test_spec_vectors(key, hash_code, key_hash, slot, slot_pos):
    assert java_string_hash(key) == hash_code
    assert index_key_hash(key) == key_hash
    assert key_hash % 5_000_000 == slot
    assert 40 + 4 * slot == slot_pos


def test_spec_vectors_vectorised(hash_mode):
    keys = [v[0] for v in SPEC_VECTORS]
    assert java_string_hashes(keys).tolist() == [v[1] for v in SPEC_VECTORS]
    assert index_key_hashes(keys).tolist() == [v[2] for v in SPEC_VECTORS]
    assert index_key_hashes(keys).dtype == np.int32


def test_utf16_code_units_not_utf8_bytes():
    # U+1F600 is the surrogate pair D83D DE00 in UTF-16: 0xD83D*31 + 0xDE00
    assert java_string_hash("\U0001F600") == 0xD83D * 31 + 0xDE00 == 1_772_899
    # 'é' is one unit 0xE9 (its UTF-8 form c3 a9 would give 0xC3*31 + 0xA9)
    assert java_string_hash("é") == 0xE9
    # a lone surrogate (legal in a Java String) is hashed as that unit
    assert java_string_hash("\ud800") == 0xD800


def test_tags_hash_spec_example():
    # store-format §3.13: "TagA".hashCode() = 2598919 = 0x0027A807; no/empty TAGS -> 0
    assert tags_hash("TagA") == 0x0027A807 == 2598919
    assert tags_hash(None) == 0
    assert tags_hash("") == 0
    assert index_key("TopicTest", "k1") == "TopicTest#k1"


def test_empty_null_and_sliced_inputs(hash_mode):
    assert index_key_hashes([]).tolist() == []
    arr = pa.array(["x", None, "", "TopicTest#k1", "polygenelubricants"])
    assert index_key_hashes(arr).tolist() == [120, 0, 0, 2746024, 0]
    # a slice has a non-zero array offset into the shared buffers
    assert index_key_hashes(arr.slice(3)).tolist() == [2746024, 0]
    chunked = pa.chunked_array([arr.slice(0, 2), arr.slice(3)])
    assert index_key_hashes(chunked).tolist() == [120, 0, 2746024, 0]
    assert index_key_hashes(arr.cast(pa.large_string())).tolist() == [120, 0, 0, 2746024, 0]


@given(st.lists(texts, max_size=30), st.integers(0, 5))
def test_vectorised_matches_reference(keys, cut):
    expect_raw = [java_string_hash(k) for k in keys]
    expect_idx = [index_key_hash(k) for k in keys]
    for pure in ("1", "0"):
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("STORE_READER_PURE", pure)
            assert java_string_hashes(keys).tolist() == expect_raw
            assert index_key_hashes(pa.array(keys, pa.string())).tolist() == expect_idx
            sliced = pa.array(keys, pa.string()).slice(min(cut, len(keys)))
            assert index_key_hashes(sliced).tolist() == expect_idx[min(cut, len(keys)):]


@given(st.lists(texts, min_size=1, max_size=5), st.lists(st.tuples(st.integers(0, 4), st.one_of(st.none(), texts)),
                                                          max_size=30), st.integers(0, 3))
def test_joined_index_key_hashes_match_the_reference(topics, puts, cut):
    """``index_key_hashes_of``: the hash of ``topic#key`` from the parts, for ASCII, non-ASCII
    (astral too), empty and null keys, on sliced arrays, both paths."""
    rows = np.array([r % len(topics) for r, _ in puts], np.int64)
    keys = [k for _, k in puts]
    expect = [0 if k is None else index_key_hash(index_key(topics[r], k)) for r, k in zip(rows, keys)]
    for pure in ("1", "0"):
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("STORE_READER_PURE", pure)
            got = index_key_hashes_of(pa.array(topics, pa.string()), rows, pa.array(keys, pa.string()))
            assert got.dtype == np.int32 and got.tolist() == expect
            at = min(cut, len(keys))
            sliced = index_key_hashes_of(pa.chunked_array([pa.array(topics, pa.string())]), rows[at:],
                                         pa.array(["-", *keys], pa.string()).slice(1 + at))
            assert sliced.tolist() == expect[at:]


def test_joined_index_key_hashes_of_the_spec_vectors(hash_mode):
    topics = pa.array(["TopicTest"])
    keys = pa.array(["k1", "7F0000010B8C18B4AAC2123456780000", "order-42", "订单"])
    got = index_key_hashes_of(topics, np.zeros(4, np.int64), keys)
    assert got.tolist() == [2746024, 279271131, 870421153, 3872117]


@given(texts)
def test_index_key_hash_is_non_negative_abs(s):
    h = java_string_hash(s)
    assert -(1 << 31) <= h < (1 << 31)
    k = index_key_hash(s)
    assert 0 <= k < (1 << 31)
    assert k == (0 if h == -(1 << 31) else abs(h))


def _recovered_messages(case):
    scan = support.expected(*case).get("afterRecovery", {}).get("commitLogScan", [])
    return [m for m in scan if "phyOffset" in m and m["topic"] != "SCHEDULE_TOPIC_XXXX"]


@pytest.mark.parametrize("case", [c for c in support.scenarios() if _recovered_messages(c)],
                         ids=support.case_id)
def test_tags_codes_of_fixture_messages(case):
    """Every recovered record's CQ tags code is TAGS.hashCode() (schedule-topic records aside)."""
    msgs = _recovered_messages(case)
    assert [tags_hash(m.get("tags")) for m in msgs] == [m["tagsCode"] for m in msgs]
