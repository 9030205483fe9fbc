"""Which machine a run came from: this boot of this host, as a short stable label.

The hardware key says what kind of machine measured a run; the gate also needs to know
whether two runs came from the *same* machine: a band measured on one machine knows
nothing of how far another machine of the same kind differs. Fresh VMs cloned from one
image share their hostname ("vm") and often /etc/machine-id, but each boot draws a new
kernel boot id, so the label is a hash of the boot id (a reboot counts as another
machine: its state is new too).
"""
from __future__ import annotations

import hashlib
from pathlib import Path

BOOT_ID = "/proc/sys/kernel/random/boot_id"


def machine_instance(boot_id_path: str | Path = BOOT_ID) -> str | None:
    """A 12-hex-digit label of this boot of this machine, or None where the kernel does not say."""
    try:
        text = Path(boot_id_path).read_text().strip()
    except OSError:
        return None
    return hashlib.sha256(text.encode()).hexdigest()[:12] if text else None
