"""What the kernel and the installed numactl can do, probed, not assumed.

The kernel probe runs in a throwaway child so a policy never sticks to the
caller. numactl has ``--version`` only from 2.0.17; older ones print
"unrecognized option", so flags are probed by running ``numactl FLAG true``.
"""
from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from numabench.machine.hugepages import thp_setting
from numabench.machine.weights_sysfs import (
    WEIGHTS_DIR,
    auto_mode_file,
    auto_mode_reason,
)

WEIGHTED_KERNEL = (6, 9)


@dataclass(frozen=True)
class Capabilities:
    kernel_release: str
    weighted_interleave_kernel: bool  # set_mempolicy accepts MPOL_WEIGHTED_INTERLEAVE
    weighted_interleave_errno: int  # 0, or what the probe got
    preferred_many_kernel: bool
    weights_dir: bool  # /sys/kernel/mm/mempolicy/weighted_interleave exists
    weights_writable: bool  # and we may write it (root)
    weights_auto_mode: bool  # the kernel has the auto-tuning switch
    numactl_path: str | None
    numactl_version: str | None  # "2.0.18", or None (absent or older than 2.0.17)
    numactl_weighted: bool  # accepts --weighted-interleave
    numactl_preferred_many: bool
    # auto mode is on: why writing a weight would change the machine for good (None: it would not)
    weights_auto_on: str | None = None
    # transparent huge pages: "enabled MODE, defrag MODE" (None: the kernel has none)
    transparent_hugepages: str | None = None

    @property
    def weighted_launcher(self) -> str | None:
        """How a weighted case is launched here: 'numactl', 'builtin', or None (kernel lacks it)."""
        if not self.weighted_interleave_kernel:
            return None
        return "numactl" if self.numactl_weighted else "builtin"

    def weighted_skip_reason(self) -> str | None:
        if not self.weighted_interleave_kernel:
            return (f"weighted interleave needs Linux >= {WEIGHTED_KERNEL[0]}.{WEIGHTED_KERNEL[1]}; "
                    f"kernel {self.kernel_release} rejected MPOL_WEIGHTED_INTERLEAVE "
                    f"({errno.errorcode.get(self.weighted_interleave_errno, self.weighted_interleave_errno)})")
        if not self.weights_dir:
            return f"weighted interleave weights directory {WEIGHTS_DIR} is missing"
        if not self.weights_writable:
            return f"setting weighted interleave weights needs root (write access to {WEIGHTS_DIR})"
        return None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["weighted_launcher"] = self.weighted_launcher
        return d


_PROBE = (
    "import sys; from numabench.numa.mempolicy import probe_mode, MPOL_WEIGHTED_INTERLEAVE, MPOL_PREFERRED_MANY;"
    "n=[int(x) for x in sys.argv[1].split(',')];"
    "print(probe_mode(MPOL_WEIGHTED_INTERLEAVE, n), probe_mode(MPOL_PREFERRED_MANY, n))"
)


def probe_kernel_modes(node: int = 0) -> tuple[int, int]:
    """(errno of weighted interleave, errno of preferred-many) on ``node``, from a child process."""
    pkg_parent = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [pkg_parent, os.environ.get("PYTHONPATH")])))
    out = subprocess.run([sys.executable, "-c", _PROBE, str(node)], capture_output=True, text=True, env=env,
                         timeout=60)
    try:
        w, p = out.stdout.split()
        return int(w), int(p)
    except ValueError:
        return errno.ENOSYS, errno.ENOSYS


def numactl_version(path: str) -> str | None:
    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    m = re.search(r"(\d+\.\d+\.\d+)", out.stdout + out.stderr)
    return m.group(1) if out.returncode == 0 and m else None


def numactl_accepts(path: str, flag: str) -> bool:
    """Whether numactl parses ``flag``. A kernel refusal still proves the flag exists."""
    out = subprocess.run([path, flag, "true"], capture_output=True, text=True, timeout=30)
    if out.returncode == 0:
        return True
    text = out.stderr + out.stdout
    return not ("unrecognized option" in text or "invalid option" in text or "usage:" in text)


def probe(weights_dir: Path = WEIGHTS_DIR, numactl: str | None = None, kernel_release: str | None = None,
          first_node: int = 0) -> Capabilities:
    """Probe this machine. ``numactl`` overrides which binary is checked (default: PATH)."""
    release = kernel_release or os.uname().release
    w_errno, pm_errno = probe_kernel_modes(first_node)
    path = numactl or shutil.which("numactl")
    version = weighted = pmany = None
    if path:
        version = numactl_version(path)
        weighted = numactl_accepts(path, f"--weighted-interleave={first_node}")
        pmany = numactl_accepts(path, f"--preferred-many={first_node}")
    node_files = sorted(weights_dir.glob("node[0-9]*")) if weights_dir.is_dir() else []
    return Capabilities(
        kernel_release=release,
        weighted_interleave_kernel=w_errno == 0,
        weighted_interleave_errno=w_errno,
        preferred_many_kernel=pm_errno == 0,
        weights_dir=weights_dir.is_dir(),
        weights_writable=bool(node_files) and all(os.access(f, os.W_OK) for f in node_files),
        weights_auto_mode=auto_mode_file(weights_dir) is not None,
        weights_auto_on=auto_mode_reason(weights_dir),
        numactl_path=path,
        numactl_version=version,
        numactl_weighted=bool(weighted),
        numactl_preferred_many=bool(pmany),
        transparent_hugepages=thp_setting(),
    )
