"""The ``place`` axis: each kind of host tensor under its own policy, or a DRAM budget split
latency-first (numabench.numa.place, budget, kind_layout, kind_check), its case ids and skip
reasons, the ranges a worker binds before the first touch, and the parent's judgement."""
from __future__ import annotations

import ctypes
import mmap
import os
from functools import cache
from pathlib import Path

import pytest

from numabench.cases import Case, parse_axis_option, parse_knob
from numabench.errors import PolicyError, UsageError
from numabench.families import family
from numabench.families.matrix import case_matrix, worker_run_key
from numabench.machine.capabilities import probe
from numabench.machine.topology import discover
from numabench.numa.budget import KindDemand, latency_first
from numabench.numa.kind_check import KindPlacement, judge_kinds, measure_kinds, rank_verdict
from numabench.numa.kind_layout import Segment, StateBuffer, buffer_segments
from numabench.numa.place import Place, format_bytes, parse_bytes
from numabench.numa.placement import PlacementReport, read_numa_maps
from numabench.numa.policy import Policy
from numabench.results.entry import case_fields, case_of_entry

MACHINES = Path(__file__).resolve().parent / "data" / "machines"
PAGE = 4096
MiB = 2**20


@cache
def machine(name: str):
    return discover(MACHINES / name)


# -- the value: grammar, canonical text, errors ---------------------------------------------

@pytest.mark.parametrize("text, canonical", [
    ("master:bind:0+moments:bind:2+grads:bind:0", "master:bind:0+grads:bind:0+moments:bind:2"),
    (" moments : interleave:0,2 ", None),
    ("weights:preferred:3+master:local", "master:local+weights:preferred:3"),
    ("budget:1.5G:0:2", "budget:1536M:0:2"),
    ("budget:4096:0:3", "budget:4K:0:3"),
    ("budget:0:1:0", "budget:0:1:0"),
])
def test_place_round_trips_canonical(text, canonical):
    place = Place.parse(text)
    if canonical is not None:
        assert str(place) == canonical
    assert Place.parse(str(place)) == place
    assert parse_knob("place", text) == str(place)


@pytest.mark.parametrize("text, message", [
    ("", "empty place value"),
    ("optimizer:bind:0", "'optimizer:bind:0' is not KIND:POLICY"),
    ("master", "is not KIND:POLICY"),
    ("master:bind:0+master:bind:1", "names master twice"),
    ("master:default", "not a per-kind policy (a kind left out gets the process policy)"),
    ("moments:weighted:0=1,2=3", "its weights are system-wide"),
    ("grads:bind:x", "kind grads"),
    ("budget:1G", "write budget:SIZE:FAST:SLOW"),
    ("budget:1T:0:2", "bad size '1T'"),
    ("budget:1.3K:0:2", "not a whole number of bytes"),
    ("budget:1G:0:0", "two different nodes"),
    ("budget:1G:٠:2", "ASCII digits"),
])
def test_bad_place_names_the_value_and_what_is_allowed(text, message):
    with pytest.raises(PolicyError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Place.parse(text)
    with pytest.raises(UsageError, match="--numa-axis place"):
        parse_knob("place", text or " ")


def test_sizes_are_binary():
    assert parse_bytes("1536M") == parse_bytes("1.5G") == 1536 * MiB
    assert format_bytes(3 * 2**30) == "3G" and format_bytes(4097) == "4097"


def test_numa_axis_separates_place_values_by_semicolons():
    assert parse_axis_option("place=moments:interleave:0,2;budget:1G:0:2") == \
        ("place", ["moments:interleave:0,2", "budget:1G:0:2"])
    assert parse_axis_option("alloc=register,torch") == ("alloc", ["register", "torch"])
    with pytest.raises(UsageError, match=r"AXIS=VALUE\[;VALUE\]"):
        parse_axis_option("place=master:bind:0;;budget:1G:0:2")


# -- the case: ids, entries, skips ---------------------------------------------------------

def cases(key: str, values: list[str], topo: str = "cxl-3node", **axes):
    return [(c, r) for c, r in case_matrix(family(key), machine(topo), probe(first_node=0),
                                           axis_overrides={"place": values, **axes})]


@pytest.mark.parametrize("key", ["adam_offload", "cpu_adam", "train_step"])
def test_place_at_auto_leaves_ids_as_they_were(key):
    plain = [c.id for c, _ in case_matrix(family(key), machine("cxl-3node"), probe(first_node=0))]
    assert plain and all("place" not in i for i in plain)
    assert [c.id for c, _ in cases(key, ["auto"])] == plain


def test_a_place_shows_in_the_id_the_run_key_and_the_entry():
    [(case, reason)] = [(c, r) for c, r in cases("cpu_adam", ["moments:bind:3+master:bind:0"],
                                                 impl=["torch-fused"]) if c.policy.id == "bind:0"]
    assert case.id == "np1-134M-bind:0-fp32-torch-fused-place=master:bind:0+moments:bind:3"
    assert reason is None
    assert "place=master:bind:0+moments:bind:3" in worker_run_key(case, family("cpu_adam"))
    fields = case_fields(case, "step", "hk")
    assert fields["place"] == "master:bind:0+moments:bind:3"
    assert case_of_entry(fields, family("cpu_adam")) == case


def test_skips_name_the_kind_or_node_the_case_lacks():
    def reason(key, place, topo="cxl-3node", **axes):
        got = {r for c, r in cases(key, [place], topo, **axes) if c.policy.id == "bind:0"}
        assert len(got) == 1, got
        return got.pop()

    assert reason("cpu_adam", "master:bind:2") == ("place master:bind:2, kind master: policy bind:2 needs NUMA node(s) 2 "
                                                   "with memory; this machine has 3 such node(s): 0,1,3")
    assert "place budget:1G:0:3 needs NUMA node(s) 3" in reason("cpu_adam", "budget:1G:0:3", "vm-1node")
    assert reason("adam_offload", "weights:bind:3", impl=["ours"], schedule=["serial"], alloc=["register"]) == (
        "place=weights:bind:3 names weights, which this adam_offload case does not keep on the host (it keeps "
        "master, moments, grads)")
    assert "allocator torch (pin_memory) places a buffer under one policy" in reason(
        "adam_offload", "budget:1G:0:3", impl=["ours"], schedule=["serial"], alloc=["torch"])
    assert reason("train_step", "master:bind:3", mode=["ddp"], model=["tiny"], cpu_bind=["node"]).startswith(
        "place=master:bind:3 places the host state of modes streamed, streamed-split, deepspeed-zero2, deepspeed-zero3")
    assert "grads, which this train_step case does not keep" in reason(
        "train_step", "grads:bind:3", mode=["streamed"], model=["tiny"], cpu_bind=["node"])


# -- the budget: latency-first, page-exact -----------------------------------------------------

def test_latency_first_fills_the_most_touched_kinds_first_and_splits_at_a_page():
    demands = [KindDemand("master", 8 * MiB, 2), KindDemand("moments", 16 * MiB, 2), KindDemand("grads", 8 * MiB, 1)]
    split = {s.kind: s for s in latency_first(demands, 12 * MiB + 123, PAGE)}
    assert [s.kind for s in latency_first(demands, 0, PAGE)] == ["master", "moments", "grads"]  # ties: listed order
    assert split["master"].fast_bytes == 8 * MiB
    assert split["moments"].fast_bytes == 4 * MiB and split["moments"].slow_bytes == 12 * MiB  # 123 B: no page
    assert split["grads"].fast_bytes == 0
    assert sum(s.slow_bytes for s in split.values()) == 32 * MiB - 12 * MiB
    everything = latency_first(demands, 64 * MiB, PAGE)
    assert all(s.slow_bytes == 0 for s in everything)
    # a less-touched kind ahead in the list still waits for the more-touched ones
    assert [s.kind for s in latency_first([KindDemand("grads", 1, 1), KindDemand("master", 1, 3)], 1, PAGE)] == \
        ["master", "grads"]
    with pytest.raises(ValueError, match="budget -1"):
        latency_first(demands, -1, PAGE)


def test_a_budget_gives_a_kinds_fast_bytes_to_its_first_buffers():
    buffers = [StateBuffer("param", "master", 8 * MiB), StateBuffer("exp_avg", "moments", 8 * MiB),
               StateBuffer("exp_avg_sq", "moments", 8 * MiB), StateBuffer("grad", "grads", 8 * MiB - 10)]
    touches = {"master": 2, "moments": 2, "grads": 1}
    segs = buffer_segments(Place.parse("budget:20M:0:2"), buffers, touches, PAGE)
    fast, slow = Policy.parse("bind:0"), Policy.parse("bind:2")
    assert segs["param"] == (Segment(0, 8 * MiB, fast),)
    assert segs["exp_avg"] == (Segment(0, 8 * MiB, fast),)
    assert segs["exp_avg_sq"] == (Segment(0, 4 * MiB, fast), Segment(4 * MiB, 4 * MiB, slow))
    assert segs["grad"] == (Segment(0, 8 * MiB, slow),)  # whole pages of the buffer
    named = buffer_segments(Place.parse("moments:bind:2"), buffers, touches, PAGE)
    assert named["exp_avg"] == (Segment(0, 8 * MiB, slow),) and named["param"] == (Segment(0, 8 * MiB, None),)


# -- the parent's judgement --------------------------------------------------------------------

def record(kind, policy, planned, by_node, untouched=0):
    return KindPlacement(kind, policy, planned, PlacementReport(by_node, untouched, "move_pages"))


TOUCHES = {"master": 2, "moments": 2, "grads": 1}


def judge(records, place, process="bind:0"):
    return judge_kinds(records, Place.parse(place), Policy.parse(process), 0, TOUCHES, PAGE, 2.0)


def test_kinds_where_their_policies_say_pass():
    records = [record("master", "bind:0", 8 * MiB, {0: 8 * MiB}), record("grads", None, 8 * MiB, {0: 8 * MiB}),
               record("moments", "bind:2", 16 * MiB, {2: 16 * MiB})]
    verdicts = judge(records, "master:bind:0+moments:bind:2")
    assert all(v.verdict.ok for v in verdicts)
    assert rank_verdict(verdicts).ok
    assert verdicts[1].to_dict()["policy"] == "process"


@pytest.mark.parametrize("records, place, message", [
    ([record("moments", "bind:2", 16 * MiB, {0: 16 * MiB})], "moments:bind:2", "expected 100% on node 2"),
    ([record("moments", "bind:0", 16 * MiB, {0: 16 * MiB})], "moments:bind:2", "placed under bind:0; place "
                                                                                "moments:bind:2 says bind:2"),
    ([record("grads", None, 8 * MiB, {2: 8 * MiB})], "moments:bind:2", "under the process policy bind:0"),
    ([record("master", "bind:0", 8 * MiB, {0: 4 * MiB}, untouched=4 * MiB)], "master:bind:0", "untouched"),
    ([record("master", "bind:0", 8 * MiB, {0: 8 * MiB})], "master:bind:0+grads:bind:2", "the worker placed no buffer"),
    # a budget plan the parent's split does not give
    ([record("master", "bind:0", 8 * MiB, {0: 8 * MiB}), record("moments", "bind:0", 8 * MiB, {0: 8 * MiB}),
      record("moments", "bind:2", 8 * MiB, {2: 8 * MiB}), record("grads", "bind:2", 8 * MiB, {2: 8 * MiB})],
     "budget:12M:0:2", "the latency-first split of budget:12M:0:2 gives 4194304"),
])
def test_a_kind_off_its_plan_or_policy_fails_naming_it(records, place, message):
    verdict = rank_verdict(judge(records, place))
    assert verdict is not None and not verdict.ok
    assert message in verdict.message


def test_the_budget_plan_the_parent_recomputes_passes():
    records = [record("master", "bind:0", 8 * MiB, {0: 8 * MiB}), record("moments", "bind:0", 8 * MiB, {0: 8 * MiB}),
               record("moments", "bind:2", 8 * MiB, {2: 8 * MiB}), record("grads", "bind:2", 8 * MiB, {2: 8 * MiB})]
    assert rank_verdict(judge(records, "budget:16M:0:2")).ok


# -- the worker side on this machine: ranges bound before the first touch -------------------------

def test_each_segment_is_its_own_mapping_policy_before_the_first_touch():
    """numa_maps shows each range's own policy (whatever node this machine has): the binding is
    real, made before the pages exist, and the pages are counted by segment."""
    from numabench.toolkit.hostmem import bind_ranges

    node = (discover("/").memory_node_ids or (0,))[0]
    size = 4 * MiB
    buf = mmap.mmap(-1, size)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    segs = (Segment(0, MiB, Policy.parse(f"bind:{node}")), Segment(MiB, 3 * MiB, Policy.parse(f"interleave:{node}")))
    try:
        bind_ranges(addr, segs)
        ctypes.memset(addr, 1, size)
        policies = {e.address: e.policy for e in read_numa_maps() if addr <= e.address < addr + size}
        assert policies == {addr: f"bind:{node}", addr + MiB: f"interleave:{node}"}
        [master] = measure_kinds([(StateBuffer("b", "master", size), addr)], {"b": segs[:1]})
        assert master.report.bytes_by_node == {node: MiB} and master.planned_bytes == MiB
    finally:
        del addr
        buf.close()


def test_mbind_to_a_node_that_does_not_exist_is_refused():
    from numabench.numa.mempolicy import mbind

    buf = mmap.mmap(-1, PAGE)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    try:
        with pytest.raises(OSError, match="mbind"):
            mbind(addr, PAGE, Policy.parse("bind:1000").mode, (1000,))
    finally:
        del addr
        buf.close()


def test_a_buffer_the_torch_allocator_would_split_is_refused():
    pytest.importorskip("torch")
    import torch

    from numabench.toolkit.hostmem import allocate

    two = (Segment(0, PAGE, Policy.parse("bind:0")), Segment(PAGE, PAGE, Policy.parse("bind:1")))
    with pytest.raises(ValueError, match="allocator torch places a buffer under one policy"):
        allocate(2 * PAGE // 4, torch.float32, "torch", two)


def test_the_process_policy_is_back_after_a_switch():
    from numabench.numa import mempolicy
    from numabench.toolkit.hostmem import thread_policy

    node = (discover("/").memory_node_ids or (0,))[0]
    before = mempolicy.get_mempolicy()
    with pytest.raises(RuntimeError):
        with thread_policy(Policy.parse(f"bind:{node}")):
            assert mempolicy.get_mempolicy() == (mempolicy.MPOL_BIND, (node,))
            raise RuntimeError("inside")
    assert mempolicy.get_mempolicy() == before
    assert os.sysconf("SC_PAGE_SIZE") == PAGE


def test_cpu_adam_places_each_kind_and_the_entry_records_it():
    """Through the runner (a re-exec'd worker): every kind of cpu_adam's state judged against its own
    policy, the kinds left out against the process policy; the entry holds each rank's kinds."""
    pytest.importorskip("torch")
    from numabench.results.entry import measured_extra_info
    from numabench.workers.run import run_case

    topo = discover("/")
    node = (topo.memory_node_ids or (0,))[0]
    case = Case("cpu_adam", 1, 1 << 18, Policy.parse(f"bind:{node}"), "fp32",
                (("impl", "torch-fused+copy"), ("place", f"master:bind:{node}+weights:interleave:{node}")))
    res = run_case(case, family("cpu_adam"), topo, probe(first_node=node), rounds=1, warmup=0, timeout_s=300)
    extra = measured_extra_info(res, "step", "hk", family("cpu_adam").metrics(res, "step"))
    [rank] = extra["placement"]
    kinds = {(k["kind"], k["policy"]): k for k in rank["kinds"]}
    assert set(kinds) == {("master", f"bind:{node}"), ("grads", "process"), ("moments", "process"),
                          ("weights", f"interleave:{node}")}
    assert kinds[("master", f"bind:{node}")]["bytes_by_node"] == {str(node): 1 << 20}
    assert kinds[("weights", f"interleave:{node}")]["planned_bytes"] == 1 << 19  # bf16
    assert all(k["ok"] for k in rank["kinds"]) and rank["ok"]
    assert extra["place"] == f"master:bind:{node}+weights:interleave:{node}"
    # every entry: the rank's memory per node as numastat -p counts it, the placed state in its Private row
    [mem] = extra["node_memory_per_rank"]
    assert set(mem) == {"huge", "heap", "stack", "private"}
    assert mem["private"][str(node)] >= (4 + 1) * (1 << 20)
    if len(topo.memory_node_ids) == 1:
        assert extra["place_note"] == f"one NUMA node with memory: every kind on node {node}"
