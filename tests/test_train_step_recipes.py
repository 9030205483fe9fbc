"""train_step's precision recipes (each mode's, and the no-offload mode of the same recipe) and the
``no-offload-master`` reference (bf16 weights, an fp32 master, gradient and moments on the device):
its update against torch.optim.AdamW in float64, bf16 weights as the master rounded, the mode
through the Trainer and the worker on the CPU, and the 5b model made on the meta device."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from helpers import adamw_reference_steps  # noqa: E402

from numabench.families.train_step import MODES  # noqa: E402
from numabench.families.train_step.master import MasterAdamW  # noqa: E402
from numabench.families.train_step.recipes import AMP, FP32, MASTER, recipe, reference_mode  # noqa: E402
from numabench.families.train_step.streamed import Hyper  # noqa: E402

HYPER = Hyper(lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
SHAPES = [(7, 3), (5,), (4, 4), (1,), (13,)]


def test_every_mode_has_a_recipe_and_a_reference_of_the_same_recipe():
    for mode in MODES:
        for dtype in ("fp32", "bf16"):
            r = recipe(mode, dtype)
            assert r.reference in MODES and recipe(r.reference, dtype).name == r.name, (mode, dtype)
            assert reference_mode(mode, dtype) == r.reference
    # the references are their own references
    assert reference_mode("no-offload", "bf16") == "no-offload" and reference_mode("no-offload-master", "bf16") == \
        "no-offload-master"


@pytest.mark.parametrize("mode, name, reference", [
    ("no-offload", AMP, "no-offload"), ("torchao-offload", AMP, "no-offload"), ("ddp", AMP, "no-offload"),
    ("streamed", MASTER, "no-offload-master"), ("deepspeed-zero2", MASTER, "no-offload-master"),
    ("deepspeed-zero3", MASTER, "no-offload-master"), ("fsdp-offload", MASTER, "no-offload-master"),
    ("fsdp", MASTER, "no-offload-master"), ("no-offload-master", MASTER, "no-offload-master")])
def test_bf16_recipes_say_weights_master_moments_and_gradients(mode, name, reference):
    r = recipe(mode, "bf16")
    assert (r.name, r.reference) == (name, reference)
    weights = "fp32 weights + bf16 autocast" if name == AMP else "bf16 weights"
    on_host = mode in ("streamed", "deepspeed-zero2", "deepspeed-zero3", "torchao-offload", "fsdp-offload")
    where = "host" if on_host else "device"
    assert r.label().startswith(f"{weights}; master fp32 on {where}") and f"moments fp32 on {where}" in r.label()
    assert r.to_dict()["label"] == r.label() and r.to_dict()["reference"] == reference


def test_recipe_labels_name_the_gradients_each_mode_reads():
    assert recipe("no-offload", "bf16").label() == ("fp32 weights + bf16 autocast; master fp32 on device (the "
                                                    "weights); moments fp32 on device; grads fp32 on device")
    assert recipe("streamed", "bf16").label() == ("bf16 weights; master fp32 on host (a copy); moments fp32 on host; "
                                                  "grads bf16 on device (widened in the update)")
    assert recipe("no-offload-master", "bf16").grads == "bf16 on device, widened to fp32 on device"
    assert recipe("torchao-offload", "fp32").grads == "fp32 on device, copied to the host"
    assert {recipe(m, "fp32").name for m in MODES} == {FP32}
    assert {recipe(m, "fp32").reference for m in MODES} == {"no-offload"}


def test_recipe_rejects_unknown_modes_and_dtypes():
    with pytest.raises(ValueError, match="unknown mode 'zero9': allowed no-offload, ddp"):
        recipe("zero9", "bf16")
    with pytest.raises(ValueError, match="dtype 'fp16': allowed fp32 or bf16"):
        recipe("streamed", "fp16")


def reference_steps(init, grads):
    """torch.optim.AdamW in float64 over the same gradients: the parameters."""
    return adamw_reference_steps(init, grads, HYPER)[0]


@pytest.mark.parametrize("widen_in_backward", [False, True])
def test_master_update_matches_torch_adamw_in_float64(widen_in_backward):
    """The flat master follows AdamW over several steps (weight decay, bias correction), and the
    weights are copied back from it; gradients taken from the hooks or in step() alike."""
    g = torch.Generator().manual_seed(1)
    params = [torch.randn(s, generator=g, dtype=torch.float64, requires_grad=True) for s in SHAPES]
    init = [p.detach().clone() for p in params]
    grads = [[torch.randn(s, generator=g, dtype=torch.float64) for s in SHAPES] for _ in range(5)]
    opt = MasterAdamW(params, HYPER, master_dtype=torch.float64, widen_in_backward=widen_in_backward)
    for gs in grads:
        # a backward pass that accumulates these gradients (the hooks fire as it does)
        sum((p * gr).sum() for p, gr in zip(params, gs)).backward()
        if widen_in_backward:
            assert all(p.grad is None for p in params)  # widened and dropped as backward went
        opt.step()
        opt.zero_grad()
    ref = reference_steps(init, grads)
    for i, (p, r) in enumerate(zip(params, ref)):
        torch.testing.assert_close(p.detach(), r.detach(), rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(opt._slice(opt.master, i), r.detach().reshape(-1), rtol=1e-12, atol=1e-14)
    opt.release()


def test_bf16_weights_are_the_fp32_master_rounded():
    g = torch.Generator().manual_seed(2)
    params = [torch.randn(s, generator=g).to(torch.bfloat16).requires_grad_(True) for s in SHAPES]
    init = [p.detach().float() for p in params]
    grads = [[torch.randn(s, generator=g).to(torch.bfloat16) for s in SHAPES] for _ in range(4)]
    opt = MasterAdamW(params, HYPER, widen_in_backward=False)
    assert opt.master.dtype == torch.float32 and opt.master.grad.dtype == torch.float32
    for gs in grads:
        for p, gr in zip(params, gs):
            p.grad = gr.clone()
        opt.step()
        opt.zero_grad()
    ref = reference_steps(init, [[x.float() for x in gs] for gs in grads])
    for i, (p, r) in enumerate(zip(params, ref)):
        master = opt._slice(opt.master, i)
        torch.testing.assert_close(master.double(), r.detach().reshape(-1), rtol=1e-5, atol=1e-6)
        assert torch.equal(p.detach().reshape(-1), master.to(torch.bfloat16))


def test_a_parameter_without_a_gradient_is_named_not_updated_with_a_stale_one():
    params = [torch.zeros(4, requires_grad=True), torch.zeros(3, requires_grad=True)]
    opt = MasterAdamW(params, HYPER, widen_in_backward=False)
    params[0].grad = torch.ones(4)
    with pytest.raises(RuntimeError, match=r"parameters \[1\] have no gradient this step"):
        opt.step()
    with pytest.raises(ValueError, match="no parameters"):
        MasterAdamW([], HYPER)


def test_trainer_master_mode_learns_and_matches_the_adamw_loss_curve():
    """fp32 on the CPU: the same loss curve as no-offload's AdamW (the master is an exact fp32 copy)."""
    from numabench.families.train_step.worker import Trainer

    curves = {}
    for mode in ("no-offload-master", "no-offload"):
        tr = Trainer(mode, "tiny", "fp32", 2, "cpu")
        curves[mode] = [float(tr.step(tr.pool[i % 4])) for i in range(6)]
        if mode == "no-offload-master":
            assert "fp32 master" in tr.impl and tr.opt.widen_in_backward
            assert set(tr.step_parts()) == {"forward", "backward", "optimizer"}
            # the host state on a CPU rank: the weights and the flat master with both moments
            assert sum(n for _, n in tr.host_state_ranges()) >= 4 * 4 * tr.n_params
    assert curves["no-offload-master"][-1] < curves["no-offload-master"][0]
    for a, b in zip(curves["no-offload-master"], curves["no-offload"]):
        assert abs(a - b) <= 1e-5 * abs(b), curves


def test_the_5b_model_is_made_on_the_meta_device_and_counted_without_torch():
    from numabench.families.train_step.configs import MODELS, param_count
    from numabench.families.train_step.model import build_model, count_params

    m = build_model("5b", device="meta")
    assert all(p.device.type == "meta" for p in m.parameters())
    assert count_params(m) == param_count(MODELS["5b"]) == 5_099_462_656
    assert MODELS["5b"].init_on_device and not MODELS["1b"].init_on_device


def test_a_model_made_on_its_device_initialises_every_parameter():
    """The meta-then-device path gives LayerNorms weight 1 and bias 0, linear biases 0 and the
    rest N(0, 0.02), the same for the same seed."""
    from numabench.families.train_step.configs import MODELS, GPTConfig
    from numabench.families.train_step.model import build_model

    cfg = GPTConfig(vocab=512, d_model=64, n_layers=2, n_heads=2, seq_len=64, init_on_device=True)
    MODELS["test-on-device"] = cfg
    try:
        a, b = build_model("test-on-device", seed=4), build_model("test-on-device", seed=4)
    finally:
        del MODELS["test-on-device"]
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    assert torch.equal(a.ln_f.weight, torch.ones(64)) and torch.equal(a.ln_f.bias, torch.zeros(64))
    assert torch.equal(a.blocks[0].qkv.bias, torch.zeros(192))
    assert abs(float(a.head.weight.detach().std()) - 0.02) < 0.002


def test_master_mode_through_the_worker_reports_its_recipe_and_memory():
    """tiny, fp32, one rank bound to a node (CPU-only machine): the model learns, the entry names
    the recipe and its reference, host memory per node (numastat -p's total, its pinned share:
    none on a CPU rank) and the bytes per parameter the mode keeps."""
    from numabench.cases import Case
    from numabench.families import family
    from numabench.machine.capabilities import probe
    from numabench.machine.topology import discover
    from numabench.numa.policy import Policy
    from numabench.workers.run import run_case

    topo = discover("/")
    if topo.gpus:
        pytest.skip("this machine has GPUs: the GPU tests run the mode there")
    node = (topo.memory_node_ids or (0,))[0]
    fam = family("train_step")
    c = Case("train_step", 1, 4, Policy.parse(f"bind:{node}"), "fp32", (("mode", "no-offload-master"), ("model", "tiny")))
    res = run_case(c, fam, topo, probe(first_node=node), rounds=3, warmup=1, timeout_s=300)
    m = fam.metrics(res, "step")
    assert m["recipe"]["name"] == FP32 and m["reference_mode"] == "no-offload"
    assert m["gpu_bytes_per_param"] == 20 and m["host_bytes_per_param"] == 0
    total = m["host_total_bytes_by_node_per_rank"][0]
    assert int(total[str(node)]) > 4 * 4 * m["n_params"]  # the process holds at least the model and its state
    assert m["host_pinned_bytes_by_node_per_rank"] == [{}]  # nothing is pinned without a GPU
    # its helper processes' private pages (none of its own here: torch's CPU ranks start none)
    assert [sum(by_node.values()) for by_node in m["host_helper_bytes_by_node_per_rank"]] == [0]
    assert m["mem_peak_reserved_per_rank_bytes"] == [None] and m["gpu_memory_bytes_per_rank"] == [None]
    assert m["pcie_h2d_bytes_per_param"] == m["pcie_d2h_bytes_per_param"] == 0
    assert m["host_optimizer_bytes_per_param"] is None


# -- GPU (.ci/gpu-offload's tests step runs these) ----------------------------------------------
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_master_mode_matches_the_fused_adamw_loss_curve():
    """fp32, tiny model, on the GPU: the flat master's fused AdamW gives torch's fused AdamW's curve."""
    from numabench.families.train_step.worker import Trainer

    curves = {}
    for mode in ("no-offload-master", "no-offload"):
        tr = Trainer(mode, "tiny", "fp32", 4, "cuda:0")
        curves[mode] = [float(tr.step(tr.pool[i % 4])) for i in range(8)]
    for a, b in zip(curves["no-offload-master"], curves["no-offload"]):
        assert abs(a - b) <= 2e-3 * abs(b), curves


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_master_mode_through_the_worker_reports_its_memory():
    """bf16, small model, one rank: the model learns (set-up check), the entry has its recipe, its
    peak GPU memory allocated and reserved (the 18 B per parameter it keeps, and more), the GPU's size
    and the host memory per node with its pinned share."""
    from numabench.cases import Case
    from numabench.families import family
    from numabench.machine.capabilities import probe
    from numabench.machine.topology import discover
    from numabench.numa.policy import Policy
    from numabench.workers.run import run_case

    topo = discover("/")
    fam = family("train_step")
    c = Case("train_step", 1, 4, Policy.parse("local"), "bf16", (("mode", "no-offload-master"), ("model", "small")))
    res = run_case(c, fam, topo, probe(first_node=(topo.memory_node_ids or (0,))[0]), rounds=3, warmup=1,
                   timeout_s=900)
    m = fam.metrics(res, "step")
    assert m["recipe"]["name"] == MASTER and m["reference_mode"] == "no-offload-master"
    [alloc], [reserved], [gpu] = (m["mem_peak_per_rank_bytes"], m["mem_peak_reserved_per_rank_bytes"],
                                  m["gpu_memory_bytes_per_rank"])
    assert 18 * m["n_params"] < alloc <= reserved < gpu, (alloc, reserved, gpu)
    total = sum(int(v) for v in m["host_total_bytes_by_node_per_rank"][0].values())
    pinned = sum(int(v) for v in m["host_pinned_bytes_by_node_per_rank"][0].values())
    assert 0 <= pinned < total, (pinned, total)
    assert "fp32 master" in m["impl"] and m["forward_ms"] > 0 and m["optimizer_ms"] > 0
