"""numabench.numa.launch.build_command: numactl vs the built-in launcher, with fake capabilities."""
from __future__ import annotations

import sys
from functools import lru_cache
from pathlib import Path

import pytest

from numabench.errors import UsageError
from numabench.machine.capabilities import Capabilities
from numabench.machine.topology import Topology, discover
from numabench.numa.launch import build_command, choose_launcher, main, numactl_flags
from numabench.numa.policy import Policy

MACHINES = Path(__file__).resolve().parent / "data" / "machines"
ARGV = ["python3", "-m", "worker", "--rank", "0"]
NUMACTL = "/usr/bin/numactl"


@lru_cache(maxsize=None)
def topo(name: str) -> Topology:
    return discover(MACHINES / name)


def caps(version: str | None, **kw) -> Capabilities:
    """numactl 2.0.16 (version None: it has no --version) or 2.0.19 (weighted), or none (path None)."""
    base = dict(kernel_release="6.12.0", weighted_interleave_kernel=True, weighted_interleave_errno=0,
                preferred_many_kernel=True, weights_dir=True, weights_writable=True, weights_auto_mode=True,
                numactl_path=NUMACTL, numactl_version=version, numactl_weighted=version == "2.0.19",
                numactl_preferred_many=True)
    base.update(kw)
    return Capabilities(**base)


NUMACTL_2016 = caps(None)
NUMACTL_2019 = caps("2.0.19")
NO_NUMACTL = caps(None, numactl_path=None, numactl_preferred_many=False)

CXL_CPUS_0 = "0-31,64-95"


@pytest.mark.parametrize("policy, flags", [
    pytest.param("default", [], id="default"),
    pytest.param("bind:1", ["--membind=1"], id="bind"),
    pytest.param("bind:0,1,3", ["--membind=0-1,3"], id="bind-set"),
    pytest.param("preferred:3", ["--preferred=3"], id="preferred"),
    pytest.param("preferred-many:0,3", ["--preferred-many=0,3"], id="preferred-many"),
    pytest.param("interleave:0,1", ["--interleave=0-1"], id="interleave"),
    pytest.param("weighted:0=1,3=3", ["--weighted-interleave=0,3"], id="weighted"),
])
def test_numactl_command(policy, flags):
    cmd, how = build_command(ARGV, Policy.parse(policy), topo("cxl-3node"), NUMACTL_2019, cpu_node=0)
    assert how == "numactl"
    assert cmd == [NUMACTL, "--cpunodebind=0", *flags, "--", *ARGV]


def test_numactl_flags_every_resolved_kind():
    assert numactl_flags(Policy.parse("weighted:0=5,1=1")) == ["--weighted-interleave=0-1"]


def test_numactl_without_cpu_node():
    cmd, how = build_command(ARGV, Policy.parse("bind:1"), topo("dgx-2socket-8gpu"), NUMACTL_2016)
    assert (cmd, how) == ([NUMACTL, "--membind=1", "--", *ARGV], "numactl")
    assert not any(a.startswith("--cpunodebind") for a in cmd)


@pytest.mark.parametrize("policy", ["bind:0", "interleave:0,1", "preferred:1", "preferred-many:0,1", "default"])
def test_numactl_2016_expresses_all_but_weighted(policy):
    cmd, how = build_command(ARGV, Policy.parse(policy), topo("dgx-2socket-8gpu"), NUMACTL_2016, cpu_node=1)
    assert how == "numactl"
    assert cmd[:2] == [NUMACTL, "--cpunodebind=1"]


@pytest.mark.parametrize("capabilities", [pytest.param(NUMACTL_2016, id="numactl-2.0.16"),
                                          pytest.param(NO_NUMACTL, id="no-numactl")])
def test_weighted_falls_back_to_builtin(capabilities):
    cmd, how = build_command(ARGV, Policy.parse("weighted:0=1,3=3"), topo("cxl-3node"), capabilities, cpu_node=0)
    assert how == "builtin"
    assert cmd == [sys.executable, "-m", "numabench.numa.launch", "--policy", "weighted:0=1,3=3", "--cpus", CXL_CPUS_0,
                   "--", *ARGV]


def test_builtin_cpus_are_the_cpu_nodes():
    cmd, _ = build_command(ARGV, Policy.parse("interleave:0,1"), topo("dgx-2socket-8gpu"), NUMACTL_2016,
                           cpu_node=1, launcher="builtin")
    assert cmd[cmd.index("--cpus") + 1] == "56-111,168-223"


def test_builtin_without_cpu_node():
    cmd, how = build_command(ARGV, Policy.parse("bind:0"), topo("vm-1node"), NO_NUMACTL)
    assert (cmd, how) == ([sys.executable, "-m", "numabench.numa.launch", "--policy", "bind:0", "--", *ARGV], "builtin")


def test_preferred_many_without_numactl_support_uses_builtin():
    c = caps(None, numactl_preferred_many=False)
    _, how = build_command(ARGV, Policy.parse("preferred-many:0,1"), topo("dgx-2socket-8gpu"), c)
    assert how == "builtin"


def test_explicit_builtin_even_with_numactl():
    _, how = build_command(ARGV, Policy.parse("bind:0"), topo("vm-1node"), NUMACTL_2019, launcher="builtin")
    assert how == "builtin"


@pytest.mark.parametrize("capabilities, have", [
    pytest.param(NUMACTL_2016, "older than 2.0.17", id="numactl-2.0.16"),
    pytest.param(caps("2.0.18"), "2.0.18", id="numactl-2.0.18"),
    pytest.param(NO_NUMACTL, "not installed", id="no-numactl"),
])
def test_explicit_numactl_refused_for_weighted(capabilities, have):
    with pytest.raises(UsageError) as ei:
        build_command(ARGV, Policy.parse("weighted:0=1,3=3"), topo("cxl-3node"), capabilities, cpu_node=0,
                      launcher="numactl")
    assert str(ei.value) == (f"numactl ({have}) cannot express policy weighted:0=1,3=3; "
                             "use launcher 'builtin' or 'auto'")


def test_explicit_numactl_ok_when_it_can():
    _, how = build_command(ARGV, Policy.parse("weighted:0=1,3=3"), topo("cxl-3node"), NUMACTL_2019,
                           launcher="numactl")
    assert how == "numactl"


def test_unknown_launcher():
    with pytest.raises(UsageError, match="unknown launcher 'srun': allowed auto, numactl, builtin"):
        choose_launcher(Policy.parse("bind:0"), NUMACTL_2019, "srun")


@pytest.mark.parametrize("policy", ["local", "interleave:all"])
@pytest.mark.parametrize("launcher", ["auto", "numactl", "builtin"])
def test_unresolved_policy_refused(policy, launcher):
    with pytest.raises(UsageError, match=f"policy {policy} must be resolved before launching"):
        build_command(ARGV, Policy.parse(policy), topo("dgx-2socket-8gpu"), NUMACTL_2019, cpu_node=0,
                      launcher=launcher)


def test_resolved_local_builds():
    p = Policy.parse("local").resolve(topo("dgx-2socket-8gpu"), own_node=1)
    cmd, _ = build_command(ARGV, p, topo("dgx-2socket-8gpu"), NUMACTL_2016, cpu_node=1)
    assert cmd == [NUMACTL, "--cpunodebind=1", "--membind=1", "--", *ARGV]


@pytest.mark.parametrize("args, message", [
    pytest.param(["--policy", "local", "--", "true"], "must be resolved", id="local"),
    pytest.param(["--policy", "interleave:all", "--", "true"], "must be resolved", id="all"),
    pytest.param(["--policy", "bogus", "--", "true"], "unknown policy kind 'bogus'", id="bad-policy"),
    pytest.param(["--policy", "default", "--cpus", "x", "--", "true"], "bad cpu entry 'x'", id="bad-cpus"),
])
def test_launcher_main_refuses_before_exec(args, message, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("numabench.numa.launch: ") and message in err


def test_a_rank_of_its_own_cpus_gets_physcpubind_or_the_launchers_cpus():
    """cpu_bind rank-cores: the worker runs on its share of the node, not the whole node."""
    cmd, how = build_command(ARGV, Policy.parse("bind:1"), topo("dgx-2socket-8gpu"), NUMACTL_2016, cpu_node=1,
                             cpus=(56, 57, 58, 60))
    assert (cmd, how) == ([NUMACTL, "--physcpubind=56-58,60", "--membind=1", "--", *ARGV], "numactl")
    cmd, how = build_command(ARGV, Policy.parse("weighted:0=1,1=1"), topo("dgx-2socket-8gpu"), NUMACTL_2016,
                             cpu_node=1, cpus=(56, 57))
    assert how == "builtin" and cmd[cmd.index("--cpus") + 1] == "56-57"
