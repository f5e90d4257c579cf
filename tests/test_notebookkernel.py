"""The notebooks' kernel (``jobs.notebookkernel``): a running cell is interrupted, and an interrupt
right after a reply (what Jupyter's shutdown sends after papermill's last ``kernel_info``) is not
caught in ipykernel's handler of that request. Stock ipykernel 7.4 logged it 22 times in 3,000
such interrupts on this machine (0.7 %): 2,000 without one leave a stock kernel's chance below 1e-6.
"""
from __future__ import annotations

import json
import sys
import time

import pytest

from jobs import notebookkernel

INTERRUPTS = 2000


@pytest.fixture
def kernel(tmp_path, monkeypatch):
    from jupyter_client import KernelManager

    spec_dir = tmp_path / "kernels" / notebookkernel.KERNEL_NAME
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps(notebookkernel.kernel_spec(sys.executable)))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    err_path = tmp_path / "kernel.stderr"
    with open(err_path, "w+", encoding="utf-8") as err:
        km = KernelManager(kernel_name=notebookkernel.KERNEL_NAME)
        km.start_kernel(stderr=err)
        kc = km.client()
        kc.start_channels()
        try:
            kc.wait_for_ready(timeout=60)
            yield km, kc, err_path
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)


def _reply(kc, msg_id: str) -> dict:
    while True:
        msg = kc.get_shell_msg(timeout=30)
        if msg["parent_header"].get("msg_id") == msg_id:
            return msg


def test_an_interrupt_stops_a_cell_and_nothing_else(kernel):
    km, kc, err_path = kernel
    for _ in range(INTERRUPTS):
        _reply(kc, kc.kernel_info())
        km.interrupt_kernel()
    started = time.monotonic()
    cell = kc.execute("import time; time.sleep(60)")
    time.sleep(1.0)
    km.interrupt_kernel()
    reply = _reply(kc, cell)["content"]
    assert (reply["status"], reply["ename"]) == ("error", "KeyboardInterrupt")
    assert time.monotonic() - started < 30
    reply = _reply(kc, kc.execute("print('still here')"))["content"]
    assert reply["status"] == "ok"
    assert "KeyboardInterrupt" not in err_path.read_text(encoding="utf-8")
