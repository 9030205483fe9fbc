"""numabench.machine.capabilities: numactl probing with fake numactl scripts, and the live kernel probe."""
from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from numabench.machine.capabilities import Capabilities, numactl_accepts, numactl_version, probe
from numabench.machine.topology import kernel_version_tuple
from numabench.machine.weights_sysfs import WEIGHTS_DIR

USAGE = """usage: numactl [--all | -a] [--balancing | -b] [--interleave= | -i <nodes>]
\t\t[--preferred= | -p <node>] [--preferred-many= | -P <nodes>]
               [--physcpubind= | -C <cpus>] [--cpunodebind= | -N <nodes>]
               [--membind= | -m <nodes>] [--localalloc | -l] command args ...
memory policy is --interleave | -i, --preferred | -p, --membind | -m, --localalloc | -l
<nodes> is a comma delimited list of node numbers or A-B ranges or all.
"""

# The options each fake knows; anything else gets numactl's getopt complaint and the usage text, exit 1.
NUMACTL_2_0_16 = r"""#!/bin/sh
# numactl 2.0.16: no --version, no --weighted-interleave; has --preferred-many
for a in "$@"; do
  case $a in
    --) break ;;
    --interleave=*|--preferred=*|--preferred-many=*|--membind=*|--cpunodebind=*|--physcpubind=*|--localalloc) ;;
    -*) echo "numactl: unrecognized option '$a'" >&2; cat >&2 <<'EOF'
@USAGE@EOF
        exit 1 ;;
    *) break ;;
  esac
done
exit 0
"""

NUMACTL_2_0_19 = r"""#!/bin/sh
# numactl 2.0.19: --version and --weighted-interleave
for a in "$@"; do
  case $a in
    --version) echo "numactl 2.0.19"; exit 0 ;;
    --) break ;;
    --interleave=*|--weighted-interleave=*|--preferred=*|--preferred-many=*|--membind=*|--cpunodebind=*) ;;
    --physcpubind=*|--localalloc) ;;
    -*) echo "numactl: unrecognized option '$a'" >&2; cat >&2 <<'EOF'
@USAGE@EOF
        exit 1 ;;
    *) break ;;
  esac
done
exit 0
"""

# Old kernel, new numactl: the flag parses but set_mempolicy fails.
NUMACTL_2_0_19_OLD_KERNEL = r"""#!/bin/sh
case $1 in
  --version) echo "numactl 2.0.19"; exit 0 ;;
  --weighted-interleave=*) echo "set_mempolicy: Invalid argument" >&2; exit 1 ;;
esac
exit 0
"""


def _script(tmp_path: Path, name: str, text: str) -> str:
    p = tmp_path / name
    p.write_text(text.replace("@USAGE@", USAGE))
    p.chmod(p.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(p)


@pytest.fixture
def numactl_2016(tmp_path):
    return _script(tmp_path, "numactl-2.0.16", NUMACTL_2_0_16)


@pytest.fixture
def numactl_2019(tmp_path):
    return _script(tmp_path, "numactl-2.0.19", NUMACTL_2_0_19)


def test_fake_2016_behaves_like_the_real_one(numactl_2016):
    import subprocess
    out = subprocess.run([numactl_2016, "--version"], capture_output=True, text=True)
    assert out.returncode == 1
    assert out.stderr.startswith("numactl: unrecognized option '--version'\nusage: numactl")


def test_version_2016_is_none(numactl_2016):
    assert numactl_version(numactl_2016) is None


def test_version_2019(numactl_2019):
    assert numactl_version(numactl_2019) == "2.0.19"


@pytest.mark.parametrize("flag, accepted_2016, accepted_2019", [
    ("--weighted-interleave=0", False, True),
    ("--preferred-many=0", True, True),
    ("--interleave=0", True, True),
    ("--membind=0", True, True),
    ("--no-such-flag", False, False),
])
def test_numactl_accepts(numactl_2016, numactl_2019, flag, accepted_2016, accepted_2019):
    assert numactl_accepts(numactl_2016, flag) is accepted_2016
    assert numactl_accepts(numactl_2019, flag) is accepted_2019


def test_kernel_refusal_still_means_the_flag_exists(tmp_path):
    fake = _script(tmp_path, "numactl", NUMACTL_2_0_19_OLD_KERNEL)
    assert numactl_accepts(fake, "--weighted-interleave=0")


def _weights_dir(tmp_path: Path, auto: str | None, nodes=(0,)) -> Path:
    d = tmp_path / "weighted_interleave"
    d.mkdir()
    for n in nodes:
        (d / f"node{n}").write_text("1\n")
    if auto:
        (d / auto).write_text("true\n")
    return d


def test_probe_with_numactl_2016(tmp_path, numactl_2016):
    d = _weights_dir(tmp_path, "__auto_type")
    c = probe(weights_dir=d, numactl=numactl_2016, kernel_release="6.18.44-fc-v595")
    assert isinstance(c, Capabilities)
    assert c.kernel_release == "6.18.44-fc-v595"
    assert (c.numactl_path, c.numactl_version, c.numactl_weighted, c.numactl_preferred_many) == \
        (numactl_2016, None, False, True)
    assert (c.weights_dir, c.weights_auto_mode) == (True, True)
    assert c.weights_writable == all(os.access(f, os.W_OK) for f in d.glob("node*"))
    if c.weighted_interleave_kernel:
        assert c.weighted_launcher == "builtin"
    assert c.to_dict()["weighted_launcher"] == c.weighted_launcher


def test_probe_with_numactl_2019(tmp_path, numactl_2019):
    d = _weights_dir(tmp_path, "auto", nodes=(0, 1, 3))
    c = probe(weights_dir=d, numactl=numactl_2019, kernel_release="6.12.0")
    assert (c.numactl_version, c.numactl_weighted, c.numactl_preferred_many) == ("2.0.19", True, True)
    assert (c.weights_dir, c.weights_auto_mode) == (True, True)
    if c.weighted_interleave_kernel:
        assert c.weighted_launcher == "numactl"


def test_probe_without_weights_dir(tmp_path, numactl_2016):
    c = probe(weights_dir=tmp_path / "absent", numactl=numactl_2016, kernel_release="6.1.0-26-amd64")
    assert (c.weights_dir, c.weights_writable, c.weights_auto_mode) == (False, False, False)


def test_probe_empty_weights_dir_is_not_writable(tmp_path, numactl_2016):
    d = _weights_dir(tmp_path, None, nodes=())
    c = probe(weights_dir=d, numactl=numactl_2016)
    assert (c.weights_dir, c.weights_writable, c.weights_auto_mode) == (True, False, False)


def test_probe_without_numactl(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no numactl on PATH
    c = probe(weights_dir=tmp_path / "absent")
    assert (c.numactl_path, c.numactl_version, c.numactl_weighted, c.numactl_preferred_many) == \
        (None, None, False, False)
    assert c.kernel_release == os.uname().release


def test_live_probe_agrees_with_sysfs():
    c = probe()
    assert c.kernel_release == os.uname().release
    assert c.numactl_path == shutil.which("numactl")
    assert c.weights_dir == WEIGHTS_DIR.is_dir()
    if kernel_version_tuple(c.kernel_release) >= (6, 9):
        # the weights directory comes with MPOL_WEIGHTED_INTERLEAVE (both since 6.9)
        assert c.weighted_interleave_kernel == WEIGHTS_DIR.is_dir(), c
    else:
        assert not c.weighted_interleave_kernel
        assert c.weighted_skip_reason().startswith("weighted interleave needs Linux >= 6.9")
    if c.weighted_interleave_kernel:
        assert c.weighted_interleave_errno == 0
        assert c.weighted_launcher in ("numactl", "builtin")
    else:
        assert c.weighted_launcher is None
    if c.weighted_interleave_kernel:
        assert c.preferred_many_kernel  # 5.15 < 6.9


def test_topo_says_when_auto_mode_makes_weighted_cases_skip(tmp_path):
    from helpers import fake_caps, fake_weights_dir

    from numabench.machine.describe import render_topology
    from numabench.machine.topology import discover
    from numabench.machine.weights_sysfs import auto_mode_reason

    auto = fake_weights_dir(tmp_path)
    reason = auto_mode_reason(auto)
    assert reason and "auto mode off" in reason
    on = render_topology(discover("/"), fake_caps(weights_auto_on=reason))
    assert "the kernel's auto mode is on, so weighted cases skip" in on and "--numa-allow-weight-writes" in on
    (auto / "auto").write_text("false\n")
    assert auto_mode_reason(auto) is None
    assert "auto mode" not in render_topology(discover("/"), fake_caps(weights_auto_on=None))


def test_the_transparent_huge_page_setting_is_read_and_shown(tmp_path):
    """What a host buffer's pages may come in, recorded with the machine (numabench topo): the
    bracketed modes of enabled, defrag and shmem_enabled, or none where the kernel has no such
    directory."""
    from helpers import fake_caps

    from numabench.machine.describe import render_topology
    from numabench.machine.hugepages import selected, thp_setting
    from numabench.machine.topology import discover

    thp = tmp_path / "transparent_hugepage"
    thp.mkdir()
    (thp / "enabled").write_text("always [madvise] never\n")
    assert thp_setting(thp) == "enabled madvise"  # no defrag file
    (thp / "defrag").write_text("always defer defer+madvise madvise [never]\n")
    assert thp_setting(thp) == "enabled madvise, defrag never"
    (thp / "shmem_enabled").write_text("always within_size advise [never] deny force\n")
    assert thp_setting(thp) == "enabled madvise, defrag never, shmem never"  # what numabench's own buffers follow
    (thp / "enabled").write_text("always madvise never\n")  # nothing chosen: not a setting
    assert thp_setting(thp) is None and selected("[always] madvise") == "always"
    assert thp_setting(tmp_path / "none") is None
    shown = render_topology(discover("/"), fake_caps(transparent_hugepages="enabled always, defrag madvise"))
    assert "transparent huge pages: enabled always, defrag madvise" in shown
    assert "transparent huge pages: none (no /sys/kernel/mm/transparent_hugepage)" in render_topology(
        discover("/"), fake_caps(transparent_hugepages=None))


SMAPS = """\
7f0000000000-7f0000400000 rw-p 00000000 00:00 0
Size:               4096 kB
AnonHugePages:      2048 kB
ShmemPmdMapped:        0 kB
VmFlags: rd wr mr mw me ac sd hg
7f0000400000-7f0000800000 rw-s 00000000 00:01 23419                      /dev/zero (deleted)
Size:               4096 kB
AnonHugePages:         0 kB
ShmemPmdMapped:     4096 kB
7f0000800000-7f0000c00000 rw-p 00000000 00:00 0
AnonHugePages:         0 kB
"""


def test_a_buffer_s_huge_pages_are_read_from_smaps_mapping_by_mapping():
    """Private anonymous (AnonHugePages) and shared anonymous, shmem (ShmemPmdMapped) mappings
    count; a range takes its share of each mapping it overlaps, evenly."""
    from numabench.machine.hugepages import huge_page_bytes, smaps_huge_bytes

    base, mib = 0x7f0000000000, 1 << 20
    assert smaps_huge_bytes([(base, 4 * mib)], SMAPS) == 2 * mib  # half the private mapping's pages
    assert smaps_huge_bytes([(base + 4 * mib, 4 * mib)], SMAPS) == 4 * mib  # the shmem one, all huge
    assert smaps_huge_bytes([(base + 2 * mib, 4 * mib)], SMAPS) == 1 * mib + 2 * mib  # half of each
    assert smaps_huge_bytes([(base + 8 * mib, 4 * mib), (0x1000, 4096)], SMAPS) == 0



def test_smaps_is_read_only_where_the_kernel_gives_huge_pages_unasked(tmp_path):
    """numabench madvises none of its buffers: under enabled madvise and shmem never (or advise)
    none of them can be in huge pages, 0 without reading smaps; under enabled always or a shmem
    mode that needs no advice, smaps says (None where it cannot be read)."""
    from numabench.machine.hugepages import huge_page_bytes, unasked_huge_pages

    thp, smaps = tmp_path / "thp", tmp_path / "smaps"
    thp.mkdir()
    smaps.write_text(SMAPS)
    mib, base = 1 << 20, 0x7f0000000000

    def setting(enabled: str, shmem: str) -> None:
        (thp / "enabled").write_text(enabled)
        (thp / "shmem_enabled").write_text(shmem)

    setting("always [madvise] never", "always within_size [advise] never deny force")
    assert not unasked_huge_pages(thp) and huge_page_bytes([(base, 4 * mib)], smaps, thp) == 0
    assert huge_page_bytes([(base, 4 * mib)], tmp_path / "none", thp) == 0  # not read at all
    for enabled, shmem in (("[always] madvise never", "[never]"), ("always [madvise] never", "[within_size] never"),
                           ("never", "always [force]")):
        setting(enabled, shmem)
        assert unasked_huge_pages(thp), (enabled, shmem)
        assert huge_page_bytes([(base, 4 * mib)], smaps, thp) == 2 * mib
        assert huge_page_bytes([(base, 4 * mib)], tmp_path / "none", thp) is None
    assert not unasked_huge_pages(tmp_path / "no-thp-here")


def test_the_placement_report_keeps_the_huge_page_bytes_through_merge_and_json():
    from numabench.numa.placement import PlacementReport

    a = PlacementReport({0: 6 << 20}, 0, "move_pages", huge_bytes=2 << 20)
    b = PlacementReport({1: 2 << 20}, 0, "move_pages", huge_bytes=0)
    both = a.merge(b)
    assert both.huge_bytes == 2 << 20 and both.huge_share() == 0.25
    assert a.merge(PlacementReport({0: 1})).huge_bytes is None  # one side not known: not known
    assert PlacementReport.from_dict(a.to_dict()) == a and "huge_bytes" not in PlacementReport({0: 1}).to_dict()
