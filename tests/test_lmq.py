"""LMQ / multi-dispatch (R§5.3, E#33): predicted and rebuilt LMQ consume queues agree."""
from __future__ import annotations

import os

import pytest

from jobs.recover import recover
from store_reader import load_broker_config, open_store
from store_reader.formats.consumequeue import decode_entries
from store_reader.broker.prediction import predict
from store_reader.testing.synthetic import encode_message

SEGMENT = 65536
CONF = ("mappedFileSizeCommitLog=65536\nmappedFileSizeConsumeQueue=600\nmaxHashSlotNum=100\n"
        "maxIndexNum=400\nenableMultiDispatch=true\nenableLmq=true\n")


def _lmq_store(root, broker_5x: bool):
    """One commitlog file: five records of TopicL/1, each also dispatched to two LMQ queues
    (the second starting at queue offset 5, so its first file begins with pre-blank fillers),
    one with mismatched lists (no copies), and no consume queues yet (the reput builds them)."""
    (root / "commitlog").mkdir(parents=True)
    (root / "broker.conf").write_text(CONF)
    buf = bytearray(SEGMENT)
    pos = 0
    for i in range(6):
        multi = ("%LMQ%a,%LMQ%b", f"{i},{5 + i}") if i < 5 else ("%LMQ%a,%LMQ%b", "9")
        rec = encode_message(topic="TopicL", queue_id=1, queue_offset=i, phy_offset=pos, body=b"x" * 10,
                             properties={"KEYS": f"k{i}", "INNER_MULTI_DISPATCH": multi[0],
                                         "INNER_MULTI_QUEUE_OFFSET": multi[1]},
                             store_timestamp=1_700_000_000_000 + i, trailing_separator=broker_5x)
        buf[pos:pos + len(rec)] = rec
        pos += len(rec)
    (root / "commitlog" / "00000000000000000000").write_bytes(bytes(buf))
    return root


def _entries(qdir):
    out = []
    for name in sorted(os.listdir(qdir)):
        e = decode_entries((qdir / name).read_bytes())
        out += [(p, s) for p, s in zip(e.phy_offset.tolist(), e.size.tolist()) if 0 < s < 0x7FFFFFFF]
    return out


@pytest.mark.parametrize("version", ["4.9", "5.3"])
def test_lmq_queues_predicted(tmp_path, version):
    root = _lmq_store(tmp_path / "store", version == "5.3")
    pred = predict(open_store(root), version)
    a, b = pred.consume_queues[("%LMQ%a", 0)], pred.consume_queues[("%LMQ%b", 0)]
    main = pred.consume_queues[("TopicL", 1)]
    assert (main.min_offset, main.max_offset) == (0, 6)
    assert (a.min_offset, a.max_offset) == (0, 5)
    assert b.min_offset == 5 if version == "5.3" else b.min_offset == 0   # 4.9.7 min lands on fillers
    assert b.max_offset == 10
    assert [int(x) for x in b.entries()["phy_offset"]][-5:] == [int(x) for x in a.entries()["phy_offset"]]


@pytest.mark.spark
def test_lmq_queues_rebuilt(spark, tmp_path):
    root = _lmq_store(tmp_path / "store", True)
    out = tmp_path / "out"
    recover(spark, str(root), str(out), str(root / "broker.conf"), "5.3")
    pred = predict(open_store(root), "5.3")
    for topic, qid in [("%LMQ%a", 0), ("%LMQ%b", 0), ("TopicL", 1)]:
        want = [(int(e["phy_offset"]), int(e["size"])) for e in pred.consume_queues[(topic, qid)].entries()
                if e["size"] != 0x7FFFFFFF]
        assert _entries(out / "consumequeue" / topic / str(qid)) == \
            want, topic
    assert load_broker_config(root / "broker.conf").enableLmq


@pytest.mark.parametrize("broker_5x", [True, False])
def test_queue_puts_are_each_records_put_then_its_lmq_copies(tmp_path, broker_5x):
    """``dispatch.queue_puts``, the one expansion of a batch into its CQ puts (what the replay,
    the rebuild, the audit and dump take): each record's own put in row order, then the copies
    ``multi_dispatch_targets`` names, a record's in property order; rows left out put nothing."""
    import numpy as np
    import pyarrow as pa

    from store_reader.broker.dispatch import multi_dispatch_targets, queue_puts
    from store_reader.formats.commitlog import SegmentScan

    root = _lmq_store(tmp_path / "store", broker_5x)
    store = open_store(root)
    cols = ["topic", "queue_id", "queue_offset", "sys_flag", "properties"]
    b = pa.Table.from_batches(list(SegmentScan(str(root / "commitlog" / f"{0:020d}"),
                                               store.scan_options(broker_5x=broker_5x), columns=cols)))
    recs = b.to_pylist()
    for keep in (None, np.arange(len(recs)) >= 3):
        p = queue_puts(store.config, broker_5x, b, keep)
        rows = [i for i in range(len(recs)) if keep is None or keep[i]]
        want = [(recs[i]["topic"], recs[i]["queue_id"], recs[i]["queue_offset"], i, 0) for i in rows]
        want += [(name, qid, offset, i, k) for i in rows for k, (name, qid, offset) in enumerate(
            multi_dispatch_targets(store.config, broker_5x, recs[i]["topic"], recs[i]["queue_id"],
                                   dict(recs[i]["properties"] or [])), 1)]
        assert p.own == len(rows)
        assert [(p.topics[t], q, o, r, c) for t, q, o, r, c in zip(
            p.topic.tolist(), p.queue_id.tolist(), p.queue_offset.tolist(), p.row.tolist(), p.copy.tolist())] == want
        assert len(want) == len(rows) + 2 * (len(rows) - 1)      # the last record's lists mismatch: no copies
