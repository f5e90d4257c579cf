"""A DLedger store written by the real 5.3.3 broker store (``compat/src/v5/oracle/DLedgerWrite``
via ``tests/oracle.py``: ``enableDLegerCommitLog``, a single-member DLedger group, kill -9): no
``commitlog/`` at all, ``dledger-n0/{data,index,currterm}``. Every job names it in one line and
exits 2, with or without its broker.conf; never the missing-commitlog advice. About 10 s.
"""
from __future__ import annotations

import socket

import pytest

from tests.test_inventory import refused_by_every_job

pytestmark = pytest.mark.slow


def test_real_dledger_store_is_refused_by_name_by_every_job(spark, tmp_path, capsys):
    from tests import oracle

    with socket.socket() as s:                 # DLedger's RPC port (not stored on disk)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    conf = tmp_path / "broker.conf"
    conf.write_text("mappedFileSizeCommitLog=65536\nmappedFileSizeConsumeQueue=600\nmaxHashSlotNum=100\n"
                    "maxIndexNum=400\nenableDLegerCommitLog=true\ndLegerGroup=g0\n"
                    f"dLegerPeers=n0-127.0.0.1:{port}\ndLegerSelfId=n0\n")
    store = tmp_path / "store"
    written = oracle.run("5.3.3", "oracle.DLedgerWrite", store, conf, 50, 3)
    assert len(written["written"]) == 50 and not (store / "commitlog").exists()
    assert sorted(p.name for p in (store / "dledger-n0").iterdir()) == ["currterm", "data", "index"]
    refused_by_every_job(store, conf, tmp_path, capsys, "a DLedger store", "dledger-n0")
    plain = tmp_path / "plain.conf"            # the broker's defaults: the directory alone says it
    plain.write_text("mappedFileSizeCommitLog=65536\n")
    refused_by_every_job(store, plain, tmp_path, capsys, "a DLedger store", "dledger-n0")
