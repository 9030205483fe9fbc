"""Shared test helpers (imported by test modules; tests/ is on sys.path under pytest)."""
from __future__ import annotations

from numabench.machine.capabilities import Capabilities


def fake_caps(**kw) -> Capabilities:
    """Capabilities as this 6.18 VM with numactl 2.0.16 has them; override any field."""
    base = dict(kernel_release="6.18.44-fc-v595", weighted_interleave_kernel=True, weighted_interleave_errno=0,
                preferred_many_kernel=True, weights_dir=True, weights_writable=True, weights_auto_mode=True,
                numactl_path="/usr/bin/numactl", numactl_version=None, numactl_weighted=False,
                numactl_preferred_many=True)
    base.update(kw)
    return Capabilities(**base)


def fake_weights_dir(tmp_path, auto: str = "true"):
    """A weighted_interleave sysfs folder with node0's weight and the auto-mode switch set to ``auto``."""
    wdir = tmp_path / "weighted_interleave"
    wdir.mkdir()
    (wdir / "node0").write_text("1\n")
    (wdir / "auto").write_text(f"{auto}\n")
    return wdir
