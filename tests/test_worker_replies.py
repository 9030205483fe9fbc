"""The worker's replies, typed both ways: a family's setup reply is its own frozen dataclass,
crosses the process boundary as JSON and is parsed strictly; a step's times are checked where
the worker makes them; every family's metrics read only fields its reply has."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest
from helpers import plausible_reply

from numabench.cases import Case, CaseResult
from numabench.families import FAMILIES, family
from numabench.replies import SetupDone, SetupReply, SetupTiming, check_step
from numabench.families.touch.reply import TouchReply
from numabench.numa.placement import PlacementReport
from numabench.numa.policy import Policy
from numabench.workers.protocol import decode, encode


def crossed(d: dict) -> dict:
    """``d`` as the other process reads it (JSON: int keys become text, tuples lists)."""
    return json.loads(json.dumps(d))


def test_from_dict_rejects_an_unknown_key_naming_it_and_the_allowed_ones():
    d = crossed(plausible_reply("touch").to_dict())
    with pytest.raises(ValueError, match=r"TouchReply has no field\(s\) 'byts': allowed placement, kinds, numa_maps, bytes"):
        TouchReply.from_dict({**d, "byts": 1})


def test_from_dict_rejects_a_missing_field_naming_it_and_the_required_ones():
    d = crossed(plausible_reply("touch").to_dict())
    del d["bytes"], d["numa_maps"]
    with pytest.raises(ValueError, match=r"TouchReply is missing required field\(s\) 'numa_maps', 'bytes': "
                                         r"required placement, numa_maps, bytes"):
        TouchReply.from_dict(d)


def test_an_optional_field_may_be_left_out_and_reads_none():
    d = crossed(plausible_reply("train_step").to_dict())
    del d["gpu_idle"]
    assert family("train_step").setup_reply.from_dict(d).gpu_idle is None


def test_a_wrong_field_name_is_a_type_error_where_the_worker_builds_the_reply():
    with pytest.raises(TypeError, match="byts"):
        TouchReply(placement=PlacementReport({0: 1}), numa_maps=PlacementReport({0: 1}), byts=1)


@pytest.mark.parametrize("key", FAMILIES)
def test_every_family_names_its_own_frozen_reply_class(key):
    reply = family(key).setup_reply
    assert issubclass(reply, SetupReply) and reply is not SetupReply, reply
    assert reply.__dataclass_params__.frozen, f"{reply.__name__} is not frozen"
    assert reply.__module__ == f"numabench.families.{key}.reply", reply.__module__


@pytest.mark.parametrize("key", FAMILIES)
def test_every_family_reply_round_trips_through_json(key):
    reply = plausible_reply(key)
    d = crossed(reply.to_dict())
    assert set(d) == {f.name for f in dataclasses.fields(reply)}
    assert d["placement"] == reply.placement.to_dict()  # the JSON shape a placement always had
    back = family(key).setup_reply.from_dict(d)
    assert back == reply
    assert crossed(back.to_dict()) == d


def test_nested_records_are_parsed_as_their_types():
    back = family("pinned_alloc").setup_reply.from_dict(crossed(plausible_reply("pinned_alloc").to_dict()))
    report = back.allocators["torch"]
    assert isinstance(report.placement, PlacementReport) and report.placement.bytes_by_node == {0: 64 * 2**20}
    with pytest.raises(ValueError, match=r"AllocatorReport has no field\(s\) 'reserved'"):
        d = crossed(plausible_reply("pinned_alloc").to_dict())
        d["allocators"]["torch"]["reserved"] = 1
        family("pinned_alloc").setup_reply.from_dict(d)


def test_setup_done_round_trips_and_is_strict():
    done = SetupDone(info=plausible_reply("touch"), verified={"check": 1e-7}, affinity=[0, 1],
                     timing=SetupTiming(main_at=1.5, import_s=0.2, setup_s=0.3, parts_s={"alloc": 0.1}))
    d = crossed(done.to_dict())
    assert SetupDone.from_dict(d, TouchReply) == done
    with pytest.raises(ValueError, match=r"SetupTiming has no field\(s\) 'setup'"):
        SetupDone.from_dict({**d, "timing": {**d["timing"], "setup": 1.0}}, TouchReply)
    with pytest.raises(ValueError, match=r"SetupDone is missing required field\(s\) 'affinity'"):
        SetupDone.from_dict({k: v for k, v in d.items() if k != "affinity"}, TouchReply)


def test_a_step_reply_is_checked():
    allowed = family("train_step").step_names()
    assert check_step({"step": 0.5, "forward": 0.1, "ds_step": 0.2}, allowed) == {"step": 0.5, "forward": 0.1,
                                                                               "ds_step": 0.2}
    with pytest.raises(ValueError, match=r"unknown phase\(s\) 'fwd': allowed step, forward, backward"):
        check_step({"step": 0.5, "fwd": 0.1}, allowed)
    for bad in (-0.001, float("nan"), float("inf"), True, "0.1", None):
        with pytest.raises(ValueError, match=r"bad time\(s\) step="):
            check_step({"step": bad}, allowed)


def test_a_family_declares_the_step_parts_its_metrics_read():
    assert "h2d" in family("dataloader").step_names()
    assert {"forward", "backward", "optimizer", "ds_step", "ds_in_timer"} <= set(family("train_step").step_names())
    assert family("touch").step_names() == ("write",)


def plausible_case(key: str) -> Case:
    fam = family(key)
    extra = tuple((axis, values[0]) for axis, values in fam.extra_axes.items())
    return Case(key, 1, (fam.default_sizes or (1 << 20,))[0], Policy.parse("default"), fam.default_dtypes[0], extra)


@pytest.mark.parametrize("key", FAMILIES)
def test_every_family_metrics_read_only_fields_its_reply_has(key):
    """Each family's metrics on a result built from its reply class: a metrics function that reads
    a field the reply lacks fails here (AttributeError), not on a machine that runs the family."""
    fam = family(key)
    times = [0.010, 0.012, 0.011]
    phases = {ph: list(times) for ph in fam.step_names()}
    reply = plausible_reply(key)
    res = CaseResult(case=plausible_case(key), phases=phases, per_rank=[phases], setup_info=[reply], placement=[],
                     launcher="none", commands=[], affinity=[[0, 1]])
    for phase in fam.phases:
        m = fam.metrics(res, phase)
        assert m and json.loads(json.dumps(m)) is not None, (phase, m)


def run_worker(script: str, messages: list[dict]) -> list[dict]:
    """``script`` (Python that patches a family, then runs workers.main for touch) fed ``messages``."""
    code = script + "\nimport sys\nsys.argv = ['main', 'touch']\nfrom numabench.workers.main import main\nsys.exit(main())"
    out = subprocess.run([sys.executable, "-c", code], input=b"".join(encode(m) for m in messages),
                         capture_output=True, timeout=60)
    return [decode(line) for line in out.stdout.splitlines()]


def test_a_step_with_an_unknown_phase_is_the_workers_error():
    setup = {"op": "setup", "spec": {"numel": 4096, "dtype": "fp32"}}
    patch = "from numabench.families.touch import worker\nworker.Worker.step = lambda self, variant=None: {'wrte': 0.1}"
    ok, step = run_worker(patch, [setup, {"op": "step"}])
    assert ok["ok"] and ok["info"]["info"]["bytes"] == 4096 * 4
    assert not step["ok"] and "unknown phase(s) 'wrte': allowed write" in step["error"], step


def test_a_setup_that_returns_no_reply_of_its_family_is_the_workers_error():
    patch = "from numabench.families.touch import worker\nworker.Worker.setup = lambda self: {'placement': {}}"
    [reply] = run_worker(patch, [{"op": "setup", "spec": {"numel": 4096, "dtype": "fp32"}}])
    assert not reply["ok"] and "returned dict: allowed TouchReply (Family.setup_reply)" in reply["error"], reply


def test_train_step_declares_every_part_its_trainer_returns():
    """The DeepSpeed timers a train_step rank keeps become step parts: each one declared, or every
    DeepSpeed step would fail in the worker's check."""
    from numabench.families.train_step.worker import DeepSpeedTimers

    parts = set(family("train_step").step_parts)
    assert {*DeepSpeedTimers.KEEP.values(), "forward", "backward", "optimizer", "ds_in_timer"} <= parts
