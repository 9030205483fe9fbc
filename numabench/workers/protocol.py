"""One JSON object per line. Parent -> worker on stdin; worker -> parent on the
original stdout, which the worker keeps for itself and points fd 1 at stderr so
that stray prints from libraries cannot corrupt the stream.

Replies: ``{"ok": true, ...}`` or ``{"ok": false, "error": ..., "traceback": ...}``; a step's
holds ``times`` (phase -> seconds) and ``cpu``, the CPU the worker was on as the step ended
(absent from a worker of older code, as an A/B's base may run)."""
from __future__ import annotations

import json
from typing import Any

OP_SETUP = "setup"
OP_STEP = "step"
OP_EXIT = "exit"


def encode(msg: dict[str, Any]) -> bytes:
    return (json.dumps(msg, separators=(",", ":")) + "\n").encode()


def decode(line: bytes) -> dict[str, Any]:
    return json.loads(line)
