"""train_step's split and ZenFlow rows, no GPU: the split's share arithmetic (streamed-split's
parameter prefix, DeepSpeed ZeRO-3's sub-groups and its ratio rule, checked against DeepSpeed's own
optimizer where deepspeed imports), the capacity prediction for the split modes (auto, the largest
model, the model only a split holds on an H200 x1), the zenflow and ratio configs the rows pass
(validated by DeepSpeed's own config classes), and the knobs that select them."""
from __future__ import annotations

import importlib.util

import pytest

from numabench.cases import Case, parse_knob
from numabench.errors import UsageError
from numabench.families.train_step import host_state_bytes, skip_reason, state_kinds
from numabench.families.train_step import memory
from numabench.families.train_step.configs import (
    MODELS,
    ZENFLOW_DEFAULTS,
    deepspeed_config,
    param_count,
    param_sizes,
    zenflow_block,
)
from numabench.families.train_step.recipes import recipe
from numabench.families.train_step.split import prefix_split, sub_group_size, zero3_on_host, zero3_split, zero3_sub_groups
from numabench.families.train_step.traffic import host_optimizer_bytes, pcie_bytes_by_direction
from numabench.numa.policy import Policy
from numabench.results.offload_predict import predict, prediction_table, split_only, split_only_models

GIB = 2**30
H200_GPU = 150_754_820_096  # as the H200 x1 baseline's run counted it (numabench_memory)
H200_HOST = 128 * GIB  # --numa-host-memory=128 there


def case(mode, model="10b", batch=1, dtype="bf16", nprocess=1, **knobs):
    extra = (("mode", mode), ("model", model)) + tuple(knobs.items())
    return Case("train_step", nprocess, batch, Policy.parse("default"), dtype, extra)


def test_param_sizes_are_the_models_parameters_in_order():
    torch = pytest.importorskip("torch")
    from numabench.families.train_step.model import build_model

    for name in ("tiny", "small"):
        assert param_sizes(MODELS[name]) == [p.numel() for p in build_model(name).parameters()]
    assert torch is not None
    assert sum(param_sizes(MODELS["10b"])) == param_count(MODELS["10b"]) == 9_932_578_816


def test_streamed_split_keeps_whole_leading_parameters_never_more_than_asked():
    sizes = [10, 20, 30, 40]
    assert prefix_split(sizes, 1.0).on_gpu == 0 and prefix_split(sizes, 0.0).on_gpu == 4
    half = prefix_split(sizes, 0.5)  # 50 elements on the GPU allowed: 10 + 20 (+30 would be 60)
    assert (half.on_gpu, half.gpu_elements, half.host_elements) == (2, 30, 70) and half.offload_ratio == 0.7
    assert prefix_split(sizes, 0.4).on_gpu == 3  # exactly 60 of 100
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match=f"offload_ratio {bad}: allowed 0 to 1"):
            prefix_split(sizes, bad)
    with pytest.raises(ValueError, match="allowed one or more sizes >= 1"):
        prefix_split([], 0.5)
    # the 10b model: whole parameters come within 1% of the share asked
    s = param_sizes(MODELS["10b"])
    assert [round(prefix_split(s, r).offload_ratio, 3) for r in (0.25, 0.5, 0.75)] == [0.251, 0.507, 0.757]


def test_zero3_sub_groups_and_ratio_follow_deepspeeds_rule():
    assert zero3_sub_groups([5, 5, 5], 100) == [15]  # the default size: one sub-group, no ratio splits it
    assert zero3_sub_groups([4, 4, 4, 4, 1], 7) == [8, 8, 1]
    assert zero3_on_host(4, 0.5) == [False, False, True, True]
    assert zero3_on_host(1, 0.5) == [True]  # int(0.5 * 1) = 0: all on the host
    assert zero3_on_host(10, 0.7) == [False] * 3 + [True] * 7
    assert zero3_on_host(10, 0.9) == [True] * 10  # (1 - 0.9) x 10 is 0.99999... in floating point: int 0
    assert zero3_split([4, 4, 4, 4, 1], 0.5, 7).offload_ratio == pytest.approx(9 / 17)
    s = param_sizes(MODELS["10b"])
    size = sub_group_size(s)
    assert len(zero3_sub_groups(s, size)) == 30
    assert [round(zero3_split(s, r, size).offload_ratio, 3) for r in (0.45, 0.5, 1.0)] == [0.459, 0.495, 1.0]


def test_the_split_modes_bytes_per_parameter_run_from_on_gpu_to_offloaded():
    # streamed-split: no-offload-master's 18 at r=0, the streamed mode's 4 at r=1; host 12r
    assert memory.gpu_bytes_per_param("streamed-split", "bf16", offload_ratio=0) == \
        memory.gpu_bytes_per_param("no-offload-master", "bf16") == 18
    assert memory.gpu_bytes_per_param("streamed-split", "bf16", offload_ratio=0.5) == 11
    assert memory.host_bytes_per_param("streamed-split", "bf16", offload_ratio=0.5) == 6
    assert memory.gpu_bytes_per_param("streamed-split", "fp32", offload_ratio=0) == 20
    # ZeRO-3: its fp32 gradient buffer stays on the host whatever the ratio
    assert memory.gpu_bytes_per_param("deepspeed-zero3", "bf16", offload_ratio=0.5) == 12
    assert memory.host_bytes_per_param("deepspeed-zero3", "bf16", offload_ratio=0.5) == 11
    assert memory.host_bytes_per_param("deepspeed-zero3", "bf16") == 18
    assert memory.gpu_bytes_per_param("deepspeed-zenflow", "bf16", topk_ratio=0.1) == pytest.approx(4.6)
    with pytest.raises(ValueError, match="offload_ratio 0.5 with mode streamed: allowed with streamed-split, "
                                         "deepspeed-zero3 only"):
        memory.gpu_bytes_per_param("streamed", "bf16", offload_ratio=0.5)
    # traffic: the split's host share moves, ZenFlow's CPU work once per update interval
    assert pcie_bytes_by_direction("streamed-split", "bf16", 0.25) == (3, 3)
    assert pcie_bytes_by_direction("deepspeed-zero3", "bf16", 0.5) == (3, 4)
    assert pcie_bytes_by_direction("deepspeed-zenflow", "bf16") == (0.5, 1)
    assert host_optimizer_bytes("deepspeed-zenflow", "bf16", update_interval=2) == 15
    assert host_optimizer_bytes("deepspeed-zero3", "bf16", 0.5) == 15 and host_optimizer_bytes("streamed-split", "bf16",
                                                                                              0.5) is None


def test_auto_keeps_the_largest_gpu_share_that_fits():
    n = param_count(MODELS["10b"])
    act = memory.activation_bytes(MODELS["10b"], 1, "bf16")
    r = memory.auto_offload_ratio("streamed-split", "bf16", n, H200_GPU, act)
    assert r == 0.31
    # it fits at r and not 0.01 under it
    def gpu_need(ratio):
        return memory.gpu_bytes_per_param("streamed-split", "bf16", offload_ratio=ratio) * n + act
    assert gpu_need(r) <= 0.95 * H200_GPU < gpu_need(r - 0.01)
    assert memory.auto_offload_ratio("streamed-split", "bf16", param_count(MODELS["small"]), H200_GPU, 0) == 0
    assert memory.auto_offload_ratio("streamed-split", "bf16", n, 8 * GIB, act) == 1  # nothing fits: recorded OOM
    # the case: its knob, else auto (ZeRO-3: DeepSpeed's 1; CPU ranks: half)
    assert memory.case_offload_ratio(case("streamed-split", offload_ratio="0.75"), H200_GPU) == 0.75
    assert memory.case_offload_ratio(case("streamed-split"), H200_GPU) == 0.31
    assert memory.case_offload_ratio(case("streamed-split", "tiny"), None) == memory.CPU_AUTO_OFFLOAD_RATIO
    assert memory.case_offload_ratio(case("deepspeed-zero3"), H200_GPU) == 1
    assert memory.case_offload_ratio(case("streamed"), H200_GPU) == 1


def test_split_capacity_is_where_the_gpu_and_host_limits_meet():
    for mode in memory.SPLIT_MODES:
        cap, r = memory.split_capacity(mode, "bf16", H200_GPU, H200_HOST)
        assert 0 < r < 1 and cap.gpu_params == pytest.approx(cap.host_params)
        for other in (max(0, r - 0.05), min(1, r + 0.05)):  # any other share holds less
            assert memory.capacity(mode, "bf16", H200_GPU, H200_HOST, 0, other).params < cap.params
    streamed_split, _ = memory.split_capacity("streamed-split", "bf16", H200_GPU, H200_HOST)
    zero3, _ = memory.split_capacity("deepspeed-zero3", "bf16", H200_GPU, H200_HOST)
    whole = max(memory.capacity(m, "bf16", H200_GPU, H200_HOST).params
                for m in ("no-offload-master", "streamed", "deepspeed-zero2", "deepspeed-zero3", "fsdp-offload"))
    assert round(streamed_split.params / 1e9, 2) == 15.08 and round(zero3.params / 1e9, 2) == 10.94
    assert round(whole / 1e9, 2) == 9.16 < zero3.params / 1e9  # the streamed mode's host limit
    with pytest.raises(ValueError, match="mode 'streamed' has no offload_ratio to choose"):
        memory.split_capacity("streamed", "bf16", H200_GPU, H200_HOST)


def test_on_an_h200_only_a_split_holds_the_10b_model():
    assert split_only_models(1, "bf16", H200_GPU, H200_HOST) == ["10b"]
    got = {p.label: p.verdict for p in predict("10b", 1, "bf16", H200_GPU, H200_HOST)}
    assert {k for k, v in got.items() if v == "fits"} == {
        "deepspeed-zero3 r=0.5", "streamed-split r=0.5", "streamed-split r=0.75", "streamed-split r=auto (0.31)"}
    assert got["no-offload-master"] == got["no-offload"] == "out of GPU memory"
    assert got["streamed"] == got["streamed-split r=1"] == got["deepspeed-zero3 r=1"] == "host too small"
    assert got["deepspeed-zenflow"] == got["deepspeed-zero2"] == got["fsdp-offload"] == "host too small"
    assert not split_only(predict("5b", 4, "bf16", H200_GPU, H200_HOST))  # no-offload-master fits there
    table = prediction_table(predict("10b", 1, "bf16", H200_GPU, H200_HOST, modes=("streamed-split",), ratios=(0.5,)))
    assert "| streamed-split r=0.5 | 101.8 + 6.8 = 108.6 | 55.5 | fits |" in table
    assert "| streamed-split r=auto (0.31) | 126.4 + 6.8 = 133.2 | 34.4 | fits |" in table


def test_the_knobs_and_which_modes_read_them():
    assert parse_knob("offload_ratio", "0.50") == "0.5" and parse_knob("offload_ratio", "1.0") == "1"
    assert parse_knob("zenflow_topk", "0.1") == "0.1" and parse_knob("zenflow_update_interval", "8") == "8"
    for bad in ("0", "1.5", "-0.2", "half", "1e-1"):
        with pytest.raises(UsageError, match="allowed auto or a share greater than 0 and at most 1"):
            parse_knob("offload_ratio", bad)
    assert case("streamed-split", offload_ratio="0.5").id.endswith("streamed-split-10b-offload_ratio=0.5")
    assert skip_reason(case("streamed", offload_ratio="0.5")) == (
        "offload_ratio=0.5 sets mode streamed-split and deepspeed-zero3; mode streamed has no such setting")
    assert "zenflow_topk=0.1 sets mode deepspeed-zenflow" in skip_reason(case("deepspeed-zero2", zenflow_topk="0.1"))
    # the host state a plan counts: the host share (ZeRO-3's gradient buffer whole)
    n = param_count(MODELS["tiny"])
    assert host_state_bytes(case("streamed-split", "tiny", offload_ratio="0.5")) == 6 * n
    assert host_state_bytes(case("deepspeed-zero3", "tiny", offload_ratio="0.5")) == 14 * n
    kinds = {k.kind: k.nbytes for k in state_kinds(case("streamed-split", "tiny", offload_ratio="0.25"))}
    assert kinds == {"master": n, "moments": 2 * n}


def test_zenflow_rows_are_marked_as_not_the_same_optimizer():
    r = recipe("deepspeed-zenflow", "bf16")
    assert r.reference == "no-offload-master" and r.short() == "bf16 + fp32 master (host, stale updates)"
    assert "not the same optimizer" in r.label() and "stale" in r.trade
    assert recipe("streamed-split", "bf16", 0.5).short() == "bf16 + fp32 master (split)"
    assert recipe("deepspeed-zero3", "bf16").short() == "bf16 + fp32 master (host)"


def test_the_configs_the_rows_pass():
    assert ZENFLOW_DEFAULTS == {"topk_ratio": 0.05, "select_strategy": "auto", "select_interval": "auto",
                                "update_interval": 4, "full_warm_up_rounds": 0, "overlap_step": True}
    cfg = deepspeed_config(2, 4, "bf16", 1e-4, zenflow=zenflow_block(0.1, 8))
    assert cfg["zero_optimization"] == {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True},
                                        "zenflow": {**ZENFLOW_DEFAULTS, "topk_ratio": 0.1, "update_interval": 8}}
    cfg = deepspeed_config(3, 4, "bf16", 1e-4, offload_ratio=0.5, sub_group_size=1000)
    assert cfg["zero_optimization"] == {"stage": 3, "sub_group_size": 1000,
                                        "offload_optimizer": {"device": "cpu", "pin_memory": True, "ratio": 0.5}}
    assert deepspeed_config(3, 4, "bf16", 1e-4)["zero_optimization"] == {
        "stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": True}}  # as before: no ratio key
    with pytest.raises(ValueError, match="offload_ratio 0.5 with ZeRO stage 2: DeepSpeed splits"):
        deepspeed_config(2, 4, "bf16", 1e-4, offload_ratio=0.5)
    with pytest.raises(ValueError, match="zenflow with ZeRO stage 3"):
        deepspeed_config(3, 4, "bf16", 1e-4, zenflow=zenflow_block())
    with pytest.raises(ValueError, match="ZenFlow topk_ratio 1.0: allowed greater than 0 and less than 1"):
        zenflow_block(1.0)
    with pytest.raises(ValueError, match="ZenFlow update_interval 0: allowed a whole number of steps >= 1"):
        zenflow_block(update_interval=0)


deepspeed_missing = importlib.util.find_spec("deepspeed") is None


@pytest.mark.skipif(deepspeed_missing, reason="the optional package deepspeed is not installed (numabench[deepspeed]): "
                                              "its config classes cannot check the configs")
def test_deepspeed_reads_the_zenflow_and_ratio_configs_as_meant():
    from deepspeed.runtime.zenflow.zenflow_config import ZenFlowConfig
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    zero = DeepSpeedZeroConfig(**deepspeed_config(2, 4, "bf16", 1e-4, zenflow=zenflow_block())["zero_optimization"])
    assert isinstance(zero.zenflow, ZenFlowConfig) and zero.stage == 2
    assert (zero.zenflow.topk_ratio, zero.zenflow.update_interval, zero.zenflow.overlap_step) == (0.05, 4, True)
    assert zero.zenflow.select_strategy == "auto" and zero.offload_optimizer.device == "cpu"
    zero = DeepSpeedZeroConfig(**deepspeed_config(3, 4, "bf16", 1e-4, offload_ratio=0.25,
                                                  sub_group_size=4096)["zero_optimization"])
    assert zero.offload_optimizer.ratio == 0.25 and zero.sub_group_size == 4096 and zero.stage == 3


@pytest.mark.skipif(deepspeed_missing, reason="the optional package deepspeed is not installed (numabench[deepspeed])")
def test_zero3_makes_the_sub_groups_the_arithmetic_says(tmp_path):
    """DeepSpeed's ZeRO-3 on its CPU accelerator (one rank, gloo) with the tiny model at ratio 0.5
    makes the sub-groups zero3_sub_groups makes. Which of them it steps on the GPU cannot show here
    (its CPU accelerator names both sides "cpu"): zero3_on_host is its expression, copied."""
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "zero3_split.py"
    script.write_text(ZERO3_SCRIPT)
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, cwd=root,
                         env={**__import__("os").environ, "DS_ACCELERATOR": "cpu", "PYTHONPATH": str(root)})
    last = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    assert last, out.stdout[-2000:] + out.stderr[-4000:]
    groups, ratio = __import__("json").loads(last[-1][len("RESULT "):])
    sizes = param_sizes(MODELS["tiny"])
    assert groups == zero3_sub_groups(sizes, sub_group_size(sizes)) and ratio == 0.5


ZERO3_SCRIPT = '''
import json, os, socket
def main():
    import torch, torch.distributed as dist
    with socket.socket() as s:  # a free port for this one process group (held by no one else after)
        s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=0, world_size=1)
    import deepspeed
    from numabench.families.train_step.configs import MODELS, deepspeed_config, param_sizes
    from numabench.families.train_step.model import build_model
    from numabench.families.train_step.split import sub_group_size
    cfg = deepspeed_config(3, 2, "fp32", 1e-3, pin_memory=False, offload_ratio=0.5,
                           sub_group_size=sub_group_size(param_sizes(MODELS["tiny"])))
    cfg["steps_per_print"] = 2**31 - 1
    net = build_model("tiny", seed=0)
    eng, opt, _, _ = deepspeed.initialize(model=net, model_parameters=net.parameters(), config=cfg,
                                          dist_init_required=False)
    print("RESULT " + json.dumps([list(map(int, opt.fp16_partitioned_groups_flat_numel)), opt.partial_offload]),
          flush=True)
    dist.destroy_process_group()
if __name__ == "__main__":
    main()
'''
