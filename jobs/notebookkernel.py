"""The notebooks' Jupyter kernel: ipykernel on the project's interpreter, where an interrupt stops
the cell being executed and nothing else.

ipykernel lets SIGINT raise ``KeyboardInterrupt`` while it answers any request, and Jupyter's
shutdown interrupts the kernel right after the last reply it waited for: papermill asks for the
kernel's info after the last cell, then shuts the kernel down. An interrupt that lands in the tail
of that reply's handler is logged as ``ERROR | KeyboardInterrupt caught in kernel.`` after a run
that went well. Here only an ``execute_request`` is interruptible; every other request leaves SIGINT
ignored, as the idle kernel has it.

``python -m jobs.notebookkernel install`` (scripts/bootstrap.sh runs it) writes the kernel spec
``rocketmq-store`` into this interpreter's environment, where Jupyter and papermill started from it
look; the notebooks name it.
"""
from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

from ipykernel.ipkernel import IPythonKernel

KERNEL_NAME = "rocketmq-store"


class StoreKernel(IPythonKernel):
    def pre_handler_hook(self) -> None:
        # ipykernel's sets SIGINT to raise for every request; kept as it is (ignored) here, and
        # post_handler_hook puts back what this saved
        self.saved_sigint_handler = signal.getsignal(signal.SIGINT)

    async def execute_request(self, stream, ident, parent) -> None:
        saved = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            await super().execute_request(stream, ident, parent)
        finally:
            signal.signal(signal.SIGINT, saved)


def kernel_spec(python: str = sys.executable) -> dict:
    return {"argv": [python, "-m", "jobs.notebookkernel", "-f", "{connection_file}"],
            "display_name": "RocketMQ store (.venv)", "language": "python",
            "metadata": {"debugger": True}}


def install(prefix: str = sys.prefix) -> Path:
    """The kernel spec in ``prefix``'s ``share/jupyter/kernels``, written whole or not at all."""
    spec_dir = Path(prefix) / "share" / "jupyter" / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True, exist_ok=True)
    tmp = spec_dir / "kernel.json.tmp"
    tmp.write_text(json.dumps(kernel_spec(), indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, spec_dir / "kernel.json")
    return spec_dir


def main(argv: list[str]) -> None:
    if argv[:1] == ["install"]:
        print(f"kernel spec {KERNEL_NAME}: {install()}")
        return
    # as ipykernel_launcher: the working directory off sys.path while ipykernel loads (the shell
    # puts it back)
    if sys.path and (sys.path[0] == "" or Path(sys.path[0]) == Path.cwd()):
        del sys.path[0]
    from ipykernel.kernelapp import IPKernelApp

    IPKernelApp.launch_instance(argv=argv, kernel_class=StoreKernel)


if __name__ == "__main__":
    main(sys.argv[1:])
