"""How a policy is applied: re-exec a worker under numactl or the built-in launcher.

``build_command`` turns (policy, CPUs to run on, argv) into the command line.
numactl is used where it can express the policy; otherwise (numactl missing, or
too old for ``--weighted-interleave``, which needs 2.0.19) the built-in
launcher, ``python -m numabench.numa.launch --policy P --cpus C -- argv...``, sets
the policy with set_mempolicy(2) and the affinity with sched_setaffinity(2),
then execs argv: a task's memory policy survives execve.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Sequence

from numabench.errors import UsageError
from numabench.machine.capabilities import Capabilities
from numabench.machine.nodelist import format_list, parse_list
from numabench.machine.topology import Topology
from numabench.numa import mempolicy
from numabench.numa.policy import Policy

LAUNCHERS = ("auto", "numactl", "builtin")
PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])


def numactl_flags(policy: Policy) -> list[str]:
    """numactl flags for a resolved policy."""
    nodes = format_list(policy.nodes)
    return {
        "default": [],
        "bind": [f"--membind={nodes}"],
        "preferred": [f"--preferred={nodes}"],
        "preferred-many": [f"--preferred-many={nodes}"],
        "interleave": [f"--interleave={nodes}"],
        "weighted": [f"--weighted-interleave={nodes}"],
    }[policy.kind]


def numactl_can_express(policy: Policy, caps: Capabilities) -> bool:
    if not caps.numactl_path:
        return False
    if policy.kind == "weighted":
        return caps.numactl_weighted
    if policy.kind == "preferred-many":
        return caps.numactl_preferred_many
    return True


def choose_launcher(policy: Policy, caps: Capabilities, launcher: str = "auto") -> str:
    if launcher not in LAUNCHERS:
        raise UsageError(f"unknown launcher {launcher!r}: allowed {', '.join(LAUNCHERS)}")
    if launcher == "auto":
        return "numactl" if numactl_can_express(policy, caps) else "builtin"
    if launcher == "numactl" and not numactl_can_express(policy, caps):
        have = caps.numactl_version or ("older than 2.0.17" if caps.numactl_path else "not installed")
        raise UsageError(f"numactl ({have}) cannot express policy {policy}; use launcher 'builtin' or 'auto'")
    return launcher


def build_command(argv: Sequence[str], policy: Policy, topology: Topology, caps: Capabilities,
                  cpu_node: int | None = None, launcher: str = "auto",
                  cpus: Sequence[int] | None = None) -> tuple[list[str], str]:
    """(command, launcher used). ``policy`` must be resolved (no 'local', no 'all'). The worker
    runs on ``cpus`` where given, else on ``cpu_node``'s CPUs, else where the OS puts it."""
    if policy.kind == "local" or policy.all_nodes:
        raise UsageError(f"policy {policy} must be resolved before launching")
    how = choose_launcher(policy, caps, launcher)
    if how == "numactl":
        cmd = [caps.numactl_path or "numactl"]
        if cpus:
            cmd.append(f"--physcpubind={format_list(cpus)}")
        elif cpu_node is not None:
            cmd.append(f"--cpunodebind={cpu_node}")
        cmd += numactl_flags(policy)
        return cmd + ["--", *argv], how
    cmd = [sys.executable, "-m", "numabench.numa.launch", "--policy", str(policy)]
    if cpus:
        cmd += ["--cpus", format_list(cpus)]
    elif cpu_node is not None:
        cmd += ["--cpus", format_list(topology.node(cpu_node).cpus)]
    return cmd + ["--", *argv], how


def worker_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for re-exec'd workers: this package importable, nothing else changed."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [PACKAGE_PARENT, env.get("PYTHONPATH")]))
    if extra:
        env.update(extra)
    return env


def apply(policy: Policy, cpus: Sequence[int] | None) -> None:
    """Apply to the calling process (the built-in launcher's job before exec)."""
    if cpus:
        mempolicy.sched_setaffinity_cpus(cpus)
    if policy.kind != "default":
        mempolicy.set_mempolicy(policy.mode, policy.nodes)


def main(args: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m numabench.numa.launch",
                                     description="Run a command under a NUMA memory policy (no numactl needed).")
    parser.add_argument("--policy", required=True, help="resolved policy, e.g. bind:0 or weighted:0=1,2=3 "
                        "(weights must already be in sysfs)")
    parser.add_argument("--cpus", default="", help="CPU list to run on, e.g. 0-15")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    ns = parser.parse_args(args)
    argv = ns.command[1:] if ns.command[:1] == ["--"] else ns.command
    if not argv:
        parser.error("no command given after --")
    try:
        policy = Policy.parse(ns.policy)
        if policy.kind == "local" or policy.all_nodes:
            raise UsageError(f"policy {policy} must be resolved (explicit nodes) for the launcher")
        apply(policy, parse_list(ns.cpus, "cpu"))
    except (UsageError, OSError) as e:
        print(f"numabench.numa.launch: {e}", file=sys.stderr)
        return 2
    try:
        os.execvp(argv[0], argv)
    except OSError as e:
        print(f"numabench.numa.launch: cannot exec {argv[0]!r}: {e.strerror}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main())
