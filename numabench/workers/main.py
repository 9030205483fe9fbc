"""Worker entry point: ``python -m numabench.workers.main FAMILY`` (argv[1]).

A family module provides ``Worker(spec)`` with ``setup() -> dict`` (allocate,
place, touch, check correctness; returns info such as the placement report)
and ``step(variant=...) -> dict[str, float]`` (one timed round, seconds per
phase; ``variant`` holds the family's worker-axis values when it has any), and
optionally ``close()``.
"""
from __future__ import annotations

import importlib
import os
import sys
import traceback

from .protocol import OP_EXIT, OP_SETUP, OP_STEP, decode, encode

FAMILY_MODULES = {
    "touch": "numabench.workers.touch",
    "adam_offload": "numabench.workers.adam_offload",
    "cpu_adam": "numabench.workers.cpu_adam",
    "host_membw": "numabench.workers.host_membw",
}


def main() -> int:
    proto_fd = os.dup(1)
    os.dup2(2, 1)  # anything printed goes to stderr, never into the protocol stream
    out = os.fdopen(proto_fd, "wb", buffering=0)
    family = sys.argv[1]
    worker = None
    for raw in sys.stdin.buffer:
        msg = decode(raw)
        op = msg.get("op")
        try:
            if op == OP_SETUP:
                module = importlib.import_module(FAMILY_MODULES[family])
                worker = module.Worker(msg["spec"])
                reply = {"ok": True, "info": worker.setup()}
            elif op == OP_STEP:
                reply = {"ok": True, "times": worker.step(**({"variant": msg["variant"]} if msg.get("variant") else {}))}
            elif op == OP_EXIT:
                if worker is not None and hasattr(worker, "close"):
                    worker.close()
                out.write(encode({"ok": True}))
                return 0
            else:
                reply = {"ok": False, "error": f"unknown op {op!r}"}
        except Exception as e:  # reported to the parent, which fails the case with it
            reply = {"ok": False, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
        out.write(encode(reply))
        if not reply["ok"]:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
