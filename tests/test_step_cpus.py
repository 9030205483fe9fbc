"""Where each worker ran its timed steps: a fresh worker process that is slower than its twin
in every variant at once (a single-threaded family such as pinned_alloc) is explained by the CPU
the OS put it on, so every invocation records, per rank, the CPU most of its steps ended on."""
from __future__ import annotations

import os
import sys
import textwrap

import pytest

from numabench.cases import Case
from numabench.families import family
from numabench.gate.pool import pool_invocations
from numabench.machine.capabilities import probe
from numabench.machine.topology import discover
from numabench.numa.launch import worker_env
from numabench.numa.policy import Policy
from numabench.results.entry import INVOCATION_CPUS, measured_extra_info
from numabench.workers.group import WorkerGroup
from numabench.workers.run import run_case

TOUCH = Case("touch", 1, 1 << 16, Policy.parse("default"), "fp32")


def test_an_invocation_records_a_cpu_its_worker_may_run_on():
    """touch's rank is bound to its node's CPUs (numactl --cpunodebind), so the OS picks one of those."""
    topo = discover("/")
    res = run_case(TOUCH, family("touch"), topo, probe(), rounds=3, warmup=1, timeout_s=60)
    [[cpu]] = res.invocation_cpus
    node = family("touch").ranks(TOUCH, topo)[0].cpu_node
    assert cpu in topo.node(node).cpus, (cpu, node)
    assert measured_extra_info(res, "write", "test-key", {})[INVOCATION_CPUS] == [[cpu]]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs: the worker's and the parent's")
def test_the_cpu_is_the_workers_not_the_parents():
    before = os.sched_getaffinity(0)
    worker_cpu, parent_cpu = sorted(before)[:2]
    os.sched_setaffinity(0, {worker_cpu})
    try:
        group = WorkerGroup([[sys.executable, "-m", "numabench.workers.main", "touch"]], worker_env(), timeout_s=60)
        os.sched_setaffinity(0, {parent_cpu})  # the worker keeps the CPU it started with
        with group:
            group.setup([{"rank": 0, "nprocess": 1, "gpu": None, "numel": 1 << 16}])
            group.step()
            assert group.step_cpus == [worker_cpu]
    finally:
        os.sched_setaffinity(0, before)


def test_pooled_invocations_keep_each_ones_cpus():
    res = run_case(TOUCH, family("touch"), discover("/"), probe(), rounds=2, warmup=0, timeout_s=60)
    other = res.__class__(**{**res.__dict__, "invocation_cpus": [[None]]})
    pooled = pool_invocations([res, other])
    assert pooled.invocation_cpus == [*res.invocation_cpus, [None]]
    assert len(pooled.invocation_cpus) == len(pooled.invocations)


# A worker of older code (an A/B's base may run one) answers its steps without "cpu".
OLD_WORKER = textwrap.dedent("""
    import json, sys
    for line in sys.stdin:
        op = json.loads(line)["op"]
        reply = {"ok": True, "times": {"write": 0.001}} if op == "step" else {"ok": True, "info": {}}
        sys.stdout.write(json.dumps(reply) + "\\n")
        sys.stdout.flush()
        if op == "exit":
            break
""")


def test_a_worker_that_does_not_say_its_cpu_reads_none():
    group = WorkerGroup([[sys.executable, "-c", OLD_WORKER]], worker_env(), timeout_s=30)
    try:
        assert group.step() == [{"write": 0.001}]
        assert group.step_cpus == [None]
    finally:
        group.close()


def test_no_entry_claims_cpus_nobody_reported():
    res = run_case(TOUCH, family("touch"), discover("/"), probe(), rounds=2, warmup=0, timeout_s=60)
    res.invocation_cpus = [[None]]
    assert INVOCATION_CPUS not in measured_extra_info(res, "write", "test-key", {})
