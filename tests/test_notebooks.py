"""The investigation notebooks (notebooks/*.ipynb) run top to bottom with papermill on audited
stores, and what they print and plot is what the Delta audit tables hold.

Stores: the demo store (``jobs.recover --demo``: a crash with a corrupt record, a torn tail and a
stale checkpoint, so lost messages, at-risk records, rewound consumer offsets and duplicate index
entries) and a synthetic store whose last records were never dispatched (``cq_behind``: the broker's
recovery re-dispatches them, ``redispatched`` findings). Expected numbers are computed here from the
Delta tables with pyarrow, independently of the notebooks' modules
(``jobs/auditrun.py``, ``jobs/duplicate_offsets.py``, ``jobs/lost_offsets.py``).

The kernel is the notebooks' own (``jobs.notebookkernel``) on this interpreter (the project's venv),
named by a kernel spec in a temporary ``JUPYTER_PATH`` so no other Jupyter installation's can stand
in for it.
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from jobs import audit as audit_job
from jobs import notebookkernel, recover
from jobs._spark.deltasink import read_table
from store_reader.testing.synthetic import CrashSpec, SyntheticStoreSpec, write_store

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
KERNEL = "rocketmq-store-venv"
DUPLICATE_KINDS = ("duplicate_phy", "duplicate_phy_on_disk", "redispatched", "replaced")
PARAMETERS = ("store_path", "audit_path", "broker_config", "out_dir")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MiB = 1 << 20


@dataclass(frozen=True)
class Audited:
    store: str
    broker_config: str
    audit: str


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    """A kernel spec that starts ipykernel in this interpreter, first on ``JUPYTER_PATH``."""
    assert importlib.util.find_spec("ipykernel") is not None, "the kernel runs this interpreter"
    spec_dir = tmp_path_factory.mktemp("jupyter") / "kernels" / KERNEL
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps(notebookkernel.kernel_spec(sys.executable)))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JUPYTER_PATH", str(spec_dir.parent.parent))
        yield KERNEL


@pytest.fixture(scope="module")
def demo(spark, tmp_path_factory) -> Audited:
    """The demo store, recovered once with its audit tables (``jobs.recover --demo``)."""
    base = tmp_path_factory.mktemp("demo")
    assert recover.main(["--demo", str(base)]) == 0
    store = base / "sample-store"
    return Audited(str(store), str(store / "broker.conf"), str(base / "audit"))


@pytest.fixture(scope="module")
def redispatched(spark, tmp_path_factory) -> Audited:
    """A killed broker's store whose last 40 records never reached the consume queues, audited."""
    base = tmp_path_factory.mktemp("redispatch")
    store = base / "store"
    spec = SyntheticStoreSpec(total_bytes=3 * MiB, segment_size=1 * MiB, cq_file_size=6000,
                              max_hash_slot_num=1024, max_index_num=4096, seed=11, broker="4.9")
    write_store(store, spec, CrashSpec(abort=True, stale_checkpoint=True, cq_behind=40), keep_messages=False)
    audit_job.run_audit(spark, str(store), str(base / "audit"), str(store / "broker.conf"))
    return Audited(str(store), str(store / "broker.conf"), str(base / "audit"))


def execute(name: str, case: Audited, kernel: str, out_dir: Path) -> tuple[nbformat.NotebookNode, dict]:
    """Run ``notebooks/<name>.ipynb`` with the case's parameters; (executed notebook, its summary)."""
    import papermill as pm

    executed = out_dir / f"{name}.ipynb"
    with kernel_stderr(out_dir / f"{name}.stderr") as err:
        pm.execute_notebook(str(NOTEBOOKS / f"{name}.ipynb"), str(executed), kernel_name=kernel,
                            parameters={"store_path": case.store, "audit_path": case.audit,
                                        "broker_config": case.broker_config, "out_dir": str(out_dir)},
                            cwd=str(NOTEBOOKS), progress_bar=False)
    # the kernel's shutdown (Jupyter interrupts it, asks it to stop, then SIGTERMs its process group
    # after 2.5 s): no interrupt caught in a handler, no JVM shutdown hook racing the driver's cleanup
    printed_err = err.read_text(encoding="utf-8", errors="replace")
    assert "KeyboardInterrupt" not in printed_err and "Failed to delete" not in printed_err, printed_err
    nb = nbformat.read(executed, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert any("injected-parameters" in c.metadata.get("tags", []) for c in code)
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert errors == []
    assert all(c.execution_count is not None for c in code)       # ran top to bottom, every cell
    # what the kernel printed: the notebook's own lines, no Spark log line or progress bar
    printed = "".join(o.get("text", "") for c in code for o in c.outputs if o.output_type == "stream")
    assert not re.search(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (WARN|ERROR|INFO) |\[Stage \d", printed, re.M), printed
    with open(out_dir / "summary.json", encoding="utf-8") as fh:
        return nb, json.load(fh)[name]


@contextlib.contextmanager
def kernel_stderr(path: Path):
    """File descriptor 2 of this process, which the kernel and its JVM inherit, into ``path``."""
    saved = os.dup(2)
    try:
        with open(path, "wb") as fh:
            os.dup2(fh.fileno(), 2)
            yield path
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def run_rows(case: Audited, table: str) -> pa.Table:
    """The rows of ``table`` written by the one run in the case's audit tables."""
    (run_id,) = read_table(case.audit + "/runs")["run_id"].to_pylist()
    t = read_table(f"{case.audit}/{table}")
    return t.filter(pc.equal(t["run_id"], run_id))


def run_row(case: Audited) -> dict:
    (row,) = read_table(case.audit + "/runs").to_pylist()
    return row


def primary_offsets(case: Audited) -> pa.Table:
    co = run_rows(case, "consumer_offset_findings")
    return co.filter(pc.equal(co["source"], "consumerOffset.json"))


def assert_png(path: str, out_dir: Path) -> None:
    """A valid, non-blank PNG written into ``out_dir``."""
    from PIL import Image

    p = Path(path)
    assert p.parent == out_dir and p.stat().st_size > 0
    assert p.read_bytes()[:8] == PNG_SIGNATURE
    with Image.open(p) as im:
        im.verify()
    with Image.open(p) as im:
        assert im.format == "PNG" and im.width >= 400 and im.height >= 200
        lo, hi = im.convert("L").getextrema()
        assert lo < hi                         # something is drawn on it


def displayed_images(nb: nbformat.NotebookNode) -> int:
    return sum(1 for c in nb.cells if c.cell_type == "code" for o in c.outputs
               if o.output_type == "display_data" and "image/png" in o.get("data", {}))


def per_queue(*named: tuple[str, dict[tuple[str, int], int]]) -> dict[str, dict[str, int]]:
    """{"topic/queue_id": {name: count}} without zero counts."""
    out: dict[str, dict[str, int]] = {}
    for name, counts in named:
        for (topic, qid), n in counts.items():
            if n:
                out.setdefault(f"{topic}/{qid}", {})[name] = n
    return out


def nonzero(summary_per_queue: dict) -> dict:
    return {q: {k: v for k, v in c.items() if v} for q, c in summary_per_queue.items()
            if any(c.values())}


def sums(t: pa.Table, value: str | None = None) -> Counter:
    c: Counter = Counter()
    for r in t.to_pylist():
        c[(r["topic"], r["queue_id"])] += 1 if value is None else r[value]
    return c


# -- the saved notebooks ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["duplicate_offsets", "lost_offsets", "timer_schedule"])
def test_notebooks_are_saved_parameterised_and_without_outputs(name):
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "parameters" in code[0].metadata.get("tags", [])
    assigned = {line.split("=")[0].strip() for line in code[0].source.splitlines() if "=" in line
                and not line.lstrip().startswith("#")}
    assert set(PARAMETERS) <= assigned
    assert all(c.outputs == [] and c.execution_count is None for c in code)
    # the store is read through Spark (the rocketmq data source, via jobs._spark.storequery), not on the driver
    assert "get_spark(" in "".join(c.source for c in code)
    assert not any(name in "".join(c.source for c in code) for name in ("SegmentScan", "read_queue", "IndexFile"))
    assert 'matplotlib.use("Agg")' in "".join(c.source for c in code)


# -- duplicate offsets ------------------------------------------------------------------------------

def expected_duplicates(case: Audited) -> dict:
    q = run_rows(case, "queue_findings")
    kinds = {k: pc.sum(q.filter(pc.equal(q["kind"], k))["count"]).as_py() or 0 for k in DUPLICATE_KINDS}
    co = primary_offsets(case)
    rewound = co.filter(pc.greater(co["redelivered"], 0))
    ix = run_rows(case, "index_findings")
    dup_ix = ix.filter(pc.equal(ix["kind"], "duplicate_entry"))
    named = [(k, sums(q.filter(pc.equal(q["kind"], k)), "count")) for k in DUPLICATE_KINDS]
    return {"queue_kinds": kinds, "duplicate_queue_entries": sum(kinds.values()),
            "redelivered": pc.sum(rewound["redelivered"]).as_py() or 0, "redelivered_groups": rewound.num_rows,
            "index_duplicates": pc.sum(dup_ix["count"]).as_py() or 0,
            "index_ranges": list(zip(dup_ix["phy_from"].to_pylist(), dup_ix["phy_to"].to_pylist())),
            "per_queue": per_queue(*named),
            "rewound": rewound}


def check_duplicates_summary(nb, summary: dict, want: dict, case: Audited, out_dir: Path) -> None:
    assert summary["run_id"] == run_row(case)["run_id"]
    for key in ("queue_kinds", "duplicate_queue_entries", "redelivered", "redelivered_groups",
                "index_duplicates"):
        assert summary[key] == want[key], key
    # the bars: duplicate CQ entries per kind, and the messages served again as the same message
    bars = nonzero(summary["per_queue"])
    again = sum(c.pop("served_again", 0) for c in bars.values())
    assert {q: c for q, c in bars.items() if c} == want["per_queue"]
    assert again == summary["redelivered_served_again"]
    # every index duplicate's message lies in a duplicate_entry finding's phy range
    assert summary["index_duplicate_phy_offsets"]
    assert all(any(lo <= p < hi for lo, hi in want["index_ranges"]) for p in summary["index_duplicate_phy_offsets"])
    plot = summary["plots"]["per_queue"]
    assert f"{want['duplicate_queue_entries']} duplicate CQ entries" in plot["title"]
    # rewound offsets are duplicates only where the same message is served again: the title counts
    # those, and the offsets new messages take apart from them
    again = summary["redelivered_served_again"]
    assert f"{again} messages served again after a rewind" in plot["title"]
    assert (f"{want['redelivered'] - again} of {want['redelivered']} rewound queue offsets are taken by new "
            "messages: not duplicates") in plot["title"]
    assert "redelivered offsets" not in plot["title"]
    assert f"{want['index_duplicates']} duplicate index entries" in plot["title"]
    assert_png(plot["path"], out_dir)
    assert displayed_images(nb) == 1


@pytest.mark.slow
@pytest.mark.spark
def test_duplicate_offsets_on_the_demo_store(demo, kernel, tmp_path):
    nb, summary = execute("duplicate_offsets", demo, kernel, tmp_path)
    want = expected_duplicates(demo)
    assert want["redelivered"] > 0 and want["index_duplicates"] > 0     # the demo exercises both
    check_duplicates_summary(nb, summary, want, demo, tmp_path)
    # What the rewound groups consumed at the offsets they get again: every group is moved back to
    # the queue's new max offset (OFFSET_OVERFLOW_BADLY), past every surviving record, so the intact
    # ones are exactly the lost dispatchable messages at those queue offsets; the others can only be
    # the record whose body CRC failed, where the broker cut the commitlog.
    lost = run_rows(demo, "lost_messages").to_pylist()
    consumed = sum(1 for g in want["rewound"].to_pylist() for m in lost
                   if (m["topic"], m["queue_id"]) == (g["topic"], g["queue_id"]) and m["sys_flag"] & 0xC in (0, 8)
                   and g["next_begin_offset"] <= m["queue_offset"] < g["committed_offset"])
    assert set(want["rewound"]["status"].to_pylist()) == {"OFFSET_OVERFLOW_BADLY"}
    assert summary["redelivered_messages_intact"] == consumed > 0
    segments = run_rows(demo, "segments").to_pylist()
    cut_at_corrupt = sum(1 for s in segments if s["end_reason"] == "corrupt" and s["end_check"] == "body_crc")
    assert 0 <= summary["redelivered_messages"] - consumed <= cut_at_corrupt
    assert summary["redelivered_served_again"] == 0


@pytest.mark.slow
@pytest.mark.spark
def test_duplicate_offsets_on_a_redispatched_store(redispatched, kernel, tmp_path):
    nb, summary = execute("duplicate_offsets", redispatched, kernel, tmp_path)
    want = expected_duplicates(redispatched)
    assert want["queue_kinds"]["redispatched"] == 40                    # the 40 undispatched records
    check_duplicates_summary(nb, summary, want, redispatched, tmp_path)
    # each re-dispatched entry is the broker's own dispatch of a record: all found by phy offset
    assert summary["queue_finding_messages"] == summary["queue_finding_messages_found"] == 40


# -- lost offsets ---------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.spark
def test_lost_offsets_on_the_demo_store(demo, kernel, tmp_path):
    nb, summary = execute("lost_offsets", demo, kernel, tmp_path)
    run = run_row(demo)
    lost = run_rows(demo, "lost_messages")
    fw = run_rows(demo, "flush_window")
    commitlog_window = fw.filter(pc.equal(fw["window"], "commitlog"))
    at_risk = pc.sum(commitlog_window["records"]).as_py()
    co = primary_offsets(demo)

    assert summary["run_id"] == run["run_id"]
    assert summary["truncation_point"] == run["truncation_point"]
    assert summary["lost_messages"] == lost.num_rows == run["lost_messages"] > 0
    assert summary["lost_by_reason"] == dict(Counter(lost["reason"].to_pylist()))
    assert summary["at_risk"] == at_risk == run["flush_window_records"] > 0
    assert summary["at_risk_by_window"] == {w: pc.sum(fw.filter(pc.equal(fw["window"], w))["records"]).as_py()
                                           for w in set(fw["window"].to_pylist())}
    assert summary["consumers_beyond_max"] == \
        pc.sum(pc.greater(co["committed_offset"], co["max_after"])).as_py() > 0
    assert summary["skipping_consumers"] == pc.sum(pc.greater(co["skipped"], 0)).as_py()
    assert summary["skipped_messages"] == pc.sum(co["skipped"]).as_py()
    # the timeline classifies the store's own records the way the audit counted them
    assert summary["timeline"]["lost"] == lost.num_rows
    assert summary["timeline"]["at_risk"] == at_risk
    assert summary["flush_time"] == commitlog_window["checkpoint_time"][0].as_py().isoformat()
    assert nonzero(summary["per_queue"]) == per_queue(("lost", sums(lost)),
                                                      ("at_risk", sums(commitlog_window, "records")))
    for plot in ("timeline", "per_queue"):
        title = summary["plots"][plot]["title"]
        assert f"{lost.num_rows} lost" in title and f"{at_risk} at risk" in title
        assert_png(summary["plots"][plot]["path"], tmp_path)
    assert displayed_images(nb) == 2
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs
                      if o.output_type == "stream")
    assert f"lost: {lost.num_rows}, at risk: {at_risk}" in printed


# -- timer schedule ---------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.oracle
def test_timer_schedule_on_a_cut_store(spark, kernel, tmp_path):
    """A 5.3.3 store written by the real broker (tests/oracle, 200 timer messages, kill -9), its
    commitlog cut in its last file (``test_timer_oracle._cut_index``), audited: the notebook's fates
    per unit are the audit's findings, its lost timer messages the audit's lost_messages rows of the
    timer topic."""
    from tests import oracle
    from tests.test_timer_oracle import BROKER_CONF, _cut_index, _damage

    store = tmp_path / "store"
    conf = tmp_path / "broker.conf"
    conf.write_text(BROKER_CONF)
    w = oracle.run("5.3.3", "TimerOracle", "write", store, conf, 200, 100, 11, "halt")
    _damage("commitlog-cut", store, w["written"])
    past = 200 - _cut_index(w["written"])
    case = Audited(str(store), str(conf), str(tmp_path / "audit"))
    audit_job.run_audit(spark, case.store, case.audit, case.broker_config)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    nb, summary = execute("timer_schedule", case, kernel, out_dir)
    found = {r["kind"]: r for r in run_rows(case, "store_findings").to_pylist() if r["kind"].startswith("timer.")}
    assert set(found) == {"timer.unit_beyond_truncation", "timer.enqueued_again"}
    assert summary["by_fate"]["lost: past the cut"] == past == int(found["timer.unit_beyond_truncation"]["detail"].split()[0])
    assert f"{summary['enqueued_again']} entries that already have a unit" in found["timer.enqueued_again"]["detail"]
    assert summary["by_fate"]["delivered twice"] == summary["enqueued_again"] > 0
    assert summary["units"] == summary["pending"] == 200
    lost = run_rows(case, "lost_messages")
    # past the cut but the damaged record itself, whose CRC fails: not a message to send again
    assert summary["lost_by_cut"] == pc.sum(pc.equal(lost["topic"], "rmq_sys_wheel_timer")).as_py() == past - 1
    assert_png(summary["plot"], out_dir)
    assert displayed_images(nb) == 1
