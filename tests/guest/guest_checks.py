"""Guest side of tests/guest: run checks inside the QEMU NUMA guest, print one JSON result.

Run by .ci/guest/run-in-guest (repo root as cwd, PYTHONPATH=<repo>), e.g.::

    python3 tests/guest/guest_checks.py topo placement weights pytest-weighted

Each named check adds an entry to the result; the last stdout line is
``GUEST-RESULT-JSON: {...}``. Progress and a readable summary go to stderr.
Exit status: 0 when every check ran to its end (the host test judges the
content), 1 when a check crashed. Needs no torch: only numabench's core.
"""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import traceback
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
# A worker's set-up and a fork server's start import torch: 2-3 minutes under TCG with a second
# guest beside this one, past the default 120 s (read when numabench.workers is imported, below).
os.environ.setdefault("NUMABENCH_SETUP_TIMEOUT_MIN_S", "600")

from numabench.cases import Case  # noqa: E402
from numabench.errors import (
    PlacementError,
    WorkerError,  # noqa: E402
)
from numabench.families import family  # noqa: E402
from numabench.machine.capabilities import probe  # noqa: E402
from numabench.machine.topology import discover  # noqa: E402
from numabench.numa.placement import (
    Expectation,
    compare,  # noqa: E402
)
from numabench.numa.policy import Policy  # noqa: E402
from numabench.numa.weights import (
    WeightSetting,
    read_weights,  # noqa: E402
)
from numabench.workers.run import run_case  # noqa: E402

# fp32 elements: a 64 MiB buffer. Splits come to the 4 KiB page here; were THP to place it, 32
# pages of 2 MiB over three nodes still fall within 1.1 pp of each policy's split. (256 MiB took
# 8 s more a case under TCG.)
NUMEL = 16 * 2**20
# The touch family's size in the benchmark runs below (its full tier's is 67.1M): as NUMEL.
TOUCH_SIZE = ["--param-sizes", str(NUMEL)]
POLICIES = ["bind:1", "preferred:2", "preferred-many:0,2", "interleave:0,1,2", "weighted:0=1,2=3",
            "weighted:0=1,1=1,2=2"]
# A deliberately wrong promise for each policy: the check must reject the real placement.
WRONG = {
    "bind:1": Expectation(within=(0,)),
    "preferred:2": Expectation(within=(0, 1)),
    "preferred-many:0,2": Expectation(within=(1,)),
    "interleave:0,1,2": Expectation(shares={0: 0.5, 1: 0.25, 2: 0.25}),
    "weighted:0=1,2=3": Expectation(shares={0: 0.75, 2: 0.25}),
    "weighted:0=1,1=1,2=2": Expectation(shares={0: 0.5, 1: 0.25, 2: 0.25}),
}
LAUNCHERS = ["numactl", "builtin"]
TOLERANCE_PP = 2.0


def log(msg: str) -> None:
    print(f"[guest] {msg}", file=sys.stderr, flush=True)


def _machine():
    topo = discover("/", gpus=[])
    caps = probe(first_node=(topo.memory_node_ids or (0,))[0])
    return topo, caps


# -- checks ------------------------------------------------------------------------

def check_topo() -> dict:
    """`python3 -m numabench topo --json`, with the Python API as a fallback."""
    cmd = [sys.executable, "-m", "numabench", "topo", "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    result = {"command": " ".join(cmd[1:]), "rc": out.returncode, "stderr_tail": out.stderr[-2000:]}
    try:
        result["data"] = json.loads(out.stdout)
        result["source"] = "cli"
    except ValueError:
        topo, caps = _machine()
        result["data"] = {"topology": topo.to_dict(), "capabilities": caps.to_dict()}
        result["source"] = "python-api (CLI output was not JSON)"
    topo = result["data"]["topology"]
    for n in topo["nodes"]:
        log(f"topo: node {n['id']} cpus={n['cpus']} mem={n['mem_total_bytes'] / 2**20:.0f} MiB "
            f"distances={n['distances']}")
    log(f"topo: kernel {topo['kernel_release']} caps={json.dumps(result['data']['capabilities'], sort_keys=True)}")
    return result


def _case(policy: str) -> Case:
    return Case("touch", 1, NUMEL, Policy.parse(policy), "fp32")


def _run(policy: str, launcher: str, topo, caps, **kw):
    return run_case(_case(policy), family("touch"), topo, caps, rounds=2, warmup=0,
                    launcher=launcher, timeout_s=300, **kw)


def _baseline(original: dict[int, int]) -> dict[int, int]:
    """Distinct non-default weights (3, 5, 7, ...) so a restore is told apart from the default 1."""
    return {n: 3 + 2 * i for i, n in enumerate(sorted(original))}


def _weights_json(w: dict[int, int]) -> dict[str, int]:
    return {str(k): v for k, v in sorted(w.items())}


def check_placement() -> dict:
    """Every policy under both launchers: the re-exec'd touch worker's pages, judged within 2 pp.

    Runs under distinct baseline weights; after each case the weights must be back to them
    (a weighted case that passes also proves its own weights were in force: the baseline
    would give another split)."""
    topo, caps = _machine()
    original = read_weights()
    baseline = _baseline(original)
    rows = []
    with WeightSetting(baseline):
        for policy in POLICIES:
            for launcher in LAUNCHERS:
                row: dict = {"policy": policy, "launcher": launcher}
                t0 = time.monotonic()
                try:
                    res = _run(policy, launcher, topo, caps)
                    p = res.placement[0]
                    row.update(
                        launcher_used=res.launcher, command=res.commands[0],
                        bytes=p.report.total_bytes, untouched=p.report.untouched_bytes,
                        percent=p.report.to_dict()["percent_by_node"],
                        numa_maps_percent=res.setup_info[0].numa_maps.to_dict()["percent_by_node"],
                        expected=policy_expectation(policy).describe(),
                        ok=bool(p.verdict and p.verdict.ok),
                        deviation_pp=round(p.verdict.deviation_pp, 3) if p.verdict else None,
                        message=p.verdict.message if p.verdict else "",
                        write_s=res.phases.get("write"),
                    )
                    wrong = compare(p.report, WRONG[policy])
                    row.update(wrong_expected=WRONG[policy].describe(), wrong_ok=wrong.ok,
                               wrong_message=wrong.message)
                except Exception as e:  # recorded; the host test fails with it
                    row.update(ok=False, error=f"{type(e).__name__}: {e}")
                row["weights_after"] = _weights_json(read_weights())
                row["weights_restored"] = read_weights() == baseline
                row["seconds"] = round(time.monotonic() - t0, 2)
                rows.append(row)
                log(f"placement {policy:22s} {launcher:8s} -> {row.get('percent', row.get('error'))} "
                    f"ok={row.get('ok')} dev={row.get('deviation_pp')}pp wrong_ok={row.get('wrong_ok')} "
                    f"weights_restored={row['weights_restored']} ({row['seconds']}s)")
    final = read_weights()
    return {"rows": rows, "numactl_path": caps.numactl_path, "numactl_version": caps.numactl_version,
            "baseline": _weights_json(baseline), "original": _weights_json(original),
            "final": _weights_json(final), "final_restored": final == original}


def policy_expectation(policy: str) -> Expectation:
    exp = Policy.parse(policy).expectation(cpu_node=0)
    assert exp is not None
    return exp


def check_weights() -> dict:
    """Weights written for a weighted case are restored when the case fails: a placement
    failure, a worker that does not answer, and an exception inside a WeightSetting block.
    (A passing case is covered by check_placement.)"""
    topo, caps = _machine()
    original = read_weights()
    baseline = _baseline(original)
    steps: list[dict] = []

    def note(name: str, **kw) -> None:
        now = read_weights()
        kw.update(weights_after=_weights_json(now), restored=now == baseline)
        steps.append({"step": name, **kw})
        log(f"weights: {name}: {kw}")

    with WeightSetting(baseline):
        note("baseline written", ok=read_weights() == baseline)
        # 1. PlacementError. Tolerance 0 does not fail an exact split (THP pages often give
        #    exactly 25.000%), so a negative tolerance rejects every placement.
        raised = None
        try:
            _run("weighted:0=1,2=3", "numactl", topo, caps, tolerance_pp=-1.0)
        except PlacementError as e:
            raised = f"PlacementError: {e}"
        except Exception as e:
            raised = f"unexpected {type(e).__name__}: {e}"
        note("failing case: PlacementError (numactl, tolerance -1)",
             ok=bool(raised and raised.startswith("PlacementError")), raised=raised)
        # 2. WorkerError: the worker hangs in its first round (fault injection) and times out.
        raised = None
        os.environ["NUMABENCH_FAULT"] = "hang@step1"
        try:
            run_case(_case("weighted:0=1,1=1,2=2"), family("touch"), topo, caps, rounds=2, warmup=0,
                     launcher="builtin", timeout_s=5)
        except WorkerError as e:
            raised = f"WorkerError: {str(e).splitlines()[0]}"
        except Exception as e:
            raised = f"unexpected {type(e).__name__}: {e}"
        finally:
            del os.environ["NUMABENCH_FAULT"]
        note("failing case: WorkerError (builtin, worker hangs, timeout 5 s)",
             ok=bool(raised and raised.startswith("WorkerError")), raised=raised)
        # 3. an exception inside the block
        inside = None
        try:
            with WeightSetting({0: 2, 2: 4}):
                inside = _weights_json(read_weights())
                raise RuntimeError("deliberate failure inside WeightSetting")
        except RuntimeError as e:
            note("exception inside WeightSetting",
                 ok=inside is not None and inside["0"] == 2 and inside["2"] == 4, weights_inside=inside, raised=str(e))
    final = read_weights()
    log(f"weights: original {original}, final {final}")
    return {"original": _weights_json(original), "baseline": _weights_json(baseline), "steps": steps,
            "final": _weights_json(final), "final_restored": final == original}


def _pytest(args: list[str], name: str) -> dict:
    xml = Path("/tmp") / f"guest-{name}.xml"
    # Only the plugin the suite needs (pytest-benchmark; numabench's own come from conftest.py):
    # each auto-loaded one costs seconds of imports under TCG.
    cmd = [sys.executable, "-m", "pytest", "-p", "pytest_benchmark.plugin", *args, "-v", "-p", "no:cacheprovider",
           f"--junitxml={xml}"]
    t0 = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=REPO,
                         env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    seconds = round(time.monotonic() - t0, 1)
    tests = []
    if xml.exists():
        for tc in ET.parse(xml).getroot().iter("testcase"):
            outcome, message = "passed", ""
            for child in tc:
                if child.tag in ("skipped", "failure", "error"):
                    outcome = {"skipped": "skipped", "failure": "failed", "error": "error"}[child.tag]
                    message = child.get("message", "") or (child.text or "")[:500]
            tests.append({"name": tc.get("name"), "outcome": outcome, "message": message})
    for t in tests:
        log(f"{name}: {t['outcome']:7s} {t['name']}  {t['message'][:160]}")
    lines = out.stdout.splitlines()
    log(f"{name}: rc={out.returncode} in {seconds}s; {lines[-1] if lines else ''}")
    return {"command": " ".join(cmd[1:]), "rc": out.returncode, "seconds": seconds, "tests": tests,
            "stdout_tail": "\n".join(lines[-60:]), "stderr_tail": out.stderr[-3000:]}


ROUNDS = ["--numa-rounds", "2", "--numa-warmup", "0"]
# The touch family's module alone: collecting every family's full tier to deselect all but touch
# took 110 s under TCG, this module 40 s.
TOUCH = "benchmarks/test_touch.py"


def check_pytest_weighted() -> dict:
    # torch is importable in the guest (the host's site-packages are shared), but under TCG only
    # the torch-free touch family is fast enough: select its weighted cases (the full tier: every
    # policy template, skipped where the kernel lacks it).
    return _pytest([TOUCH, "--numa-tier=full", "-k", "weighted", *TOUCH_SIZE, *ROUNDS], "pytest-weighted")


def check_pytest_forked() -> dict:
    """Workers forked from a fork server (--numa-forkserver) under every touch policy of three
    nodes: the policy numactl or the built-in launcher gave the stand-in is the one the worker's
    pages land by (each case's placement check). The server imports torch once (slow under TCG)."""
    runs = Path("/tmp") / "guest-pytest-forked.json"
    out = _pytest([TOUCH, "--numa-tier=full", "--numa-forkserver", *TOUCH_SIZE, *ROUNDS,
                   f"--benchmark-json={runs}"], "pytest-forked")
    entries = json.loads(runs.read_text())["benchmarks"] if runs.exists() else []
    out["launchers"] = {e["extra_info"]["policy"]: e["extra_info"]["launcher"] for e in entries}
    return out


def check_pytest_all() -> dict:
    return _pytest([TOUCH, "--numa-tier=full", *TOUCH_SIZE, *ROUNDS], "pytest-all")


def check_advise() -> dict:
    """The advisor's plumbing on a multi-node kernel: touch bound to each node and weighted
    between them, then numabench advise on the run (under TCG the times mean nothing)."""
    out_json = Path("/tmp/guest-advise.json")
    run = _pytest([TOUCH, "--numa-tier=full", "--numa-policies",
                   "bind:0;bind:1;weighted:0=1,1=1;weighted:0=3,1=1", f"--benchmark-json={out_json}", *TOUCH_SIZE,
                   *ROUNDS], "advise-run")
    adv = subprocess.run([sys.executable, "-m", "numabench", "advise", str(out_json)], capture_output=True, text=True,
                         timeout=300, cwd=REPO)
    log(f"advise: rc={adv.returncode}; {adv.stdout.strip().splitlines()[-1] if adv.stdout.strip() else adv.stderr[-300:]}")
    return {"run_rc": run["rc"], "rc": adv.returncode, "stdout": adv.stdout[-6000:], "stderr": adv.stderr[-2000:]}


AFFINITY_PROBE = ("import json, os; print(json.dumps({'affinity': sorted(os.sched_getaffinity(0)), "
                  "'pid': os.getpid()}))")


def check_cpu_bind() -> dict:
    """A rank of its own CPUs (cpu_bind rank-cores) under a memory policy of another node: the
    command numabench builds (numactl --physcpubind, or the built-in launcher's --cpus) runs
    where it says, whichever launcher."""
    from numabench.numa.launch import build_command, worker_env

    topo, caps = _machine()
    rows = []
    for launcher in ("numactl", "builtin"):
        for cpu_node, policy in ((0, "bind:1"), (1, "interleave:0,2")):
            cpus = topo.node(cpu_node).cpus[:1]
            cmd, how = build_command([sys.executable, "-c", AFFINITY_PROBE], Policy.parse(policy), topo, caps,
                                     cpu_node=cpu_node, launcher=launcher, cpus=cpus)
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=worker_env())
            row = {"launcher": launcher, "launcher_used": how, "policy": policy, "cpus": list(cpus),
                   "command": cmd, "rc": out.returncode, "stderr_tail": out.stderr[-1000:]}
            try:
                row.update(json.loads(out.stdout.strip().splitlines()[-1]))
            except (ValueError, IndexError):
                row["stdout_tail"] = out.stdout[-1000:]
            log(f"cpu-bind: {launcher} {policy} cpus={list(cpus)} -> {row.get('affinity')} (rc {out.returncode})")
            rows.append(row)
    return {"rows": rows}


# -- the place axis: each kind of host tensor on its own node --------------------------------

PLACE_NUMEL = 4 * 2**20  # fp32 elements per tensor: 16 MiB, adam_offload's four make 64 MiB
PLACE_PLANS = [
    # three kinds over three nodes, node 2 CPU-less (a CXL expander's place)
    {"place": "master:bind:0+grads:bind:1+moments:bind:2", "process": "default"},
    # one kind named, the others left to the process policy
    {"place": "moments:bind:2", "process": "bind:1"},
    # 40 MiB of node 0: master (16) and 24 of the moments' 32 there, 8 of them and the grads (16) on node 2
    {"place": "budget:40M:0:2", "process": "default"},
]
PLACE_CPU_ADAM = ["budget:20M:0:2", "master:bind:1+grads:bind:2+moments:bind:0+weights:bind:2"]
PLACE_STREAMED = "master:bind:2+moments:bind:1"


def _pages_by_segment(host: dict, state) -> list[dict]:
    """Page by page (move_pages), each segment of each buffer: the nodes its pages are on."""
    from numabench.numa.mempolicy import page_nodes

    rows = []
    for name, buf in host.items():
        for seg in state.segments[name]:
            counts: dict[str, int] = {}
            for status in page_nodes(buf.address + seg.offset, seg.nbytes):
                counts[str(status)] = counts.get(str(status), 0) + 1
            rows.append({"buffer": name, "kind": state.buffers[name].kind, "offset": seg.offset, "bytes": seg.nbytes,
                         "policy": str(seg.policy) if seg.policy else None, "pages_by_node": counts})
    return rows


def _place_adam_offload_host(plan: dict, topo) -> dict:
    """adam_offload's host state (the worker's own host_state(), its GPU parts skipped: pageable
    buffers) under a placement, in this process, judged as the parent judges a worker's."""
    import torch

    from numabench.families import family
    from numabench.families.adam_offload.worker import host_state
    from numabench.numa.kind_check import judge_kinds, rank_verdict
    from numabench.numa.place import Place
    from numabench.toolkit.hostmem import thread_policy

    place = Place.parse(plan["place"]).resolve(topo, 0)
    process = Policy.parse(plan["process"])
    with thread_policy(None if process.kind == "default" else process):  # the process policy's stand-in
        host, state = host_state(PLACE_NUMEL, torch.float32, "pageable", place)
    try:
        records = state.report({n: b.address for n, b in host.items()})
        touches = {k.kind: k.touches for k in family("adam_offload").state_kinds(
            Case("adam_offload", 1, PLACE_NUMEL, process, "fp32"))}
        verdicts = judge_kinds(records, place, process, 0, touches, os.sysconf("SC_PAGE_SIZE"), TOLERANCE_PP)
        # the same pages against a placement they do not follow: the check must refuse them
        wrong = Place.parse("master:bind:2+grads:bind:0+moments:bind:1" if place.budget is None else "budget:8M:0:2")
        wrong_verdict = rank_verdict(judge_kinds(records, wrong, process, 0, touches, os.sysconf("SC_PAGE_SIZE"),
                                                 TOLERANCE_PP))
        return {"place": plan["place"], "process": plan["process"], "kinds": [v.to_dict() for v in verdicts],
                "ok": bool(rank_verdict(verdicts) and rank_verdict(verdicts).ok),
                "segments": _pages_by_segment(host, state),
                "wrong_place": str(wrong), "wrong_ok": bool(wrong_verdict and wrong_verdict.ok)}
    finally:
        for b in host.values():
            b.release()


def check_place() -> dict:
    """The place axis on three nodes: adam_offload's host state in this process (per-kind, a kind
    left to the process policy, a DRAM budget), train_step's streamed mode through the runner."""
    topo, caps = _machine()
    out: dict = {"adam_offload_host": []}
    for plan in PLACE_PLANS:
        t0 = time.monotonic()
        try:
            row = _place_adam_offload_host(plan, topo)
        except Exception as e:  # recorded; the host test fails with it
            row = {"place": plan["place"], "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
        row["seconds"] = round(time.monotonic() - t0, 1)
        out["adam_offload_host"].append(row)
        log(f"place adam_offload host {plan['place']} (process {plan['process']}): ok={row.get('ok')} "
            f"{[(k['kind'], k['policy'], k['bytes_by_node']) for k in row.get('kinds', [])]} ({row['seconds']}s)")
    t0 = time.monotonic()
    try:
        case = Case("train_step", 1, 2, Policy.parse("bind:0"), "fp32",
                    (("mode", "streamed"), ("model", "tiny"), ("place", PLACE_STREAMED)))
        res = run_case(case, family("train_step"), topo, caps, rounds=1, warmup=0, timeout_s=600)
        out["train_step"] = {"placement": [p.to_dict() for p in res.placement],
                             "losses": res.setup_info[0].setup_losses}
    except Exception as e:
        out["train_step"] = {"error": f"{type(e).__name__}: {e}"}
    out["train_step"]["seconds"] = round(time.monotonic() - t0, 1)
    log(f"place train_step streamed {PLACE_STREAMED}: {out['train_step'].get('error') or 'ran'} "
        f"({out['train_step']['seconds']}s)")
    return out


def check_place_cpu_adam() -> dict:
    """The place axis through pytest: cpu_adam's workers, the parent's checks, the entries."""
    json_path = Path("/tmp/guest-place-cpu_adam.json")
    run = _pytest(["benchmarks/test_cpu_adam.py", "--numa-policies", "bind:0", "--param-sizes", "2097152",
                   "--numa-axis", "impl=torch-fused+copy", "--numa-axis", "place=" + ";".join(PLACE_CPU_ADAM),
                   f"--benchmark-json={json_path}", *ROUNDS], "place-cpu_adam")
    out = {k: run[k] for k in ("rc", "tests", "stdout_tail", "seconds")}
    out["entries"] = []
    if json_path.exists():
        for b in json.loads(json_path.read_text())["benchmarks"]:
            x = b["extra_info"]
            out["entries"].append({"name": b["name"], "place": x.get("place"), "placement": x.get("placement"),
                                   "node_memory_per_rank": x.get("node_memory_per_rank")})
    return out


# -- a buffer's first touch on threads (numabench.toolkit.touch_pages) --------------------------

TOUCH_POLICIES = ["default", "bind:1", "bind:1,2", "preferred:2", "interleave:0,1,2", "weighted:0=1,2=3"]
TOUCH_BYTES = 32 * 2**20


def _touched(threads: int):
    """A fresh mapping touched by ``threads`` threads: where its pages are (move_pages)."""
    import ctypes
    import mmap

    from numabench.numa.placement import pages_report
    from numabench.toolkit.touch_pages import touch_pages

    buf = mmap.mmap(-1, TOUCH_BYTES)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    try:
        touch_pages(addr, TOUCH_BYTES, 0x3C, threads=threads)
        return pages_report([(addr, TOUCH_BYTES)])
    finally:
        del addr
        buf.close()


def check_touch_threads() -> dict:
    """Under each task policy, this thread on node 0's CPUs: a buffer touched by 4 threads against
    one touched by this thread alone (each judged against the policy's promise); and how many
    threads touch_threads grants on CPUs of two nodes and on one node's."""
    from numabench.toolkit.hostmem import thread_policy
    from numabench.toolkit.touch_pages import touch_threads

    topo, _ = _machine()
    before = os.sched_getaffinity(0)
    big = 1 << 40
    out: dict = {"threads_on_two_nodes": touch_threads(big, set(topo.node(0).cpus) | set(topo.node(1).cpus)),
                 "threads_on_node0": touch_threads(big, set(topo.node(0).cpus)), "rows": []}
    weights = WeightSetting({n: 1 for n in read_weights()} | {2: 3})
    try:
        os.sched_setaffinity(0, topo.node(0).cpus)
        for name in TOUCH_POLICIES:
            policy = Policy.parse(name)
            row: dict = {"policy": name}
            try:
                with contextlib.ExitStack() as stack:
                    if policy.kind == "weighted":
                        stack.enter_context(weights)
                    stack.enter_context(thread_policy(None if policy.kind == "default" else policy))
                    for threads in (1, 4):
                        report = _touched(threads)
                        row[f"threads_{threads}"] = {str(k): round(v, 2) for k, v in
                                                     report.to_dict()["percent_by_node"].items()}
                        verdict = compare(report, policy.expectation(cpu_node=0))
                        row[f"ok_{threads}"], row[f"message_{threads}"] = verdict.ok, verdict.message
            except Exception as e:  # recorded; the host test fails with it
                row["error"] = f"{type(e).__name__}: {e}"
            log(f"touch-threads {name:18s} 1 thread {row.get('threads_1')} 4 threads {row.get('threads_4')} "
                f"{row.get('error', '')}")
            out["rows"].append(row)
    finally:
        os.sched_setaffinity(0, before)
    out["weights_restored"] = not weights.problems
    return out


CHECKS = {
    "advise": check_advise,
    "place": check_place,
    "place-cpu_adam": check_place_cpu_adam,
    "cpu-bind": check_cpu_bind,
    "touch-threads": check_touch_threads,
    "topo": check_topo,
    "placement": check_placement,
    "weights": check_weights,
    "pytest-weighted": check_pytest_weighted,
    "pytest-all": check_pytest_all,
    "pytest-forked": check_pytest_forked,
}


def main(argv: list[str]) -> int:
    unknown = [a for a in argv if a not in CHECKS]
    if unknown or not argv:
        print(f"usage: guest_checks.py CHECK...; checks: {', '.join(CHECKS)} (unknown: {unknown})", file=sys.stderr)
        return 2
    result: dict = {"kernel": os.uname().release, "in_guest": os.environ.get("NUMABENCH_IN_GUEST") == "1"}
    rc = 0
    for name in argv:
        t0 = time.monotonic()
        try:
            result[name] = check = CHECKS[name]()
        except Exception as e:
            result[name] = check = {"crashed": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
            log(f"{name} crashed: {traceback.format_exc()}")
            rc = 1
        check["check_seconds"] = round(time.monotonic() - t0, 1)
        log(f"{name}: done in {check['check_seconds']}s")
    print("GUEST-RESULT-JSON: " + json.dumps(result, sort_keys=True), flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
