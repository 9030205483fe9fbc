"""train_step's streamed mode on the CPU: the chunk planner, the host state (allocated, placed,
every element once), the update against torch.optim.AdamW in float64 over several steps (weight
decay, bias correction; chunks that split and pack parameters; with and without the backward
hooks), bf16 working weights with an fp32 master, and the mode end to end through the worker."""
from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")

from helpers import adamw_reference_steps  # noqa: E402

from numabench.families.train_step.streamed import (
    Hyper,
    StreamedAdamW,
    plan_chunks,
    torch_adamw_chunk_,
)

HYPER = Hyper(lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)


@pytest.mark.parametrize("sizes,chunk", [([5, 3, 12, 1, 7], 4), ([5, 3, 12, 1, 7], 100), ([10], 3),
                                         ([1, 1, 1], 2), ([0, 4, 0], 3)])
def test_plan_covers_every_element_once_last_parameters_first(sizes, chunk):
    chunks = plan_chunks(sizes, chunk)
    total = sum(sizes)
    seen = []
    for c in chunks:
        assert 0 < c.count <= chunk
        assert sum(p.count for p in c.pieces) == c.count
        # a chunk is one contiguous range of the flat state
        ranges = sorted((p.offset, p.offset + p.count) for p in c.pieces)
        assert ranges[0][0] == c.offset and ranges[-1][1] == c.offset + c.count
        assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
        seen += [i for lo, hi in ranges for i in range(lo, hi)]
    assert sorted(seen) == list(range(total))
    # backward makes the last parameters' gradients first: the first chunk holds the last parameter's end
    last = max(i for i, n in enumerate(sizes) if n)
    assert last in chunks[0].params
    offsets = [c.offset for c in chunks]
    assert offsets == sorted(offsets, reverse=True)
    # every chunk but the last (the first parameters') is full
    assert all(c.count == chunk for c in chunks[:-1])


def test_plan_rejects_bad_values():
    with pytest.raises(ValueError, match="chunk=0"):
        plan_chunks([3], 0)
    with pytest.raises(ValueError, match="sizes"):
        plan_chunks([3, -1], 2)


def reference_steps(init, grads, hyper=HYPER):
    """torch.optim.AdamW in float64 over the same gradients."""
    return adamw_reference_steps(init, grads, hyper)


def step_with(opt, params, grads, device=None):
    """One optimizer step per gradient set, the gradients set as a backward pass would."""
    for gs in grads:
        for p, gr in zip(params, gs):
            p.grad = gr.to(device) if device else gr.clone()
        opt.step()
        opt.zero_grad()


def shapes():
    return [(7, 3), (5,), (4, 4), (1,), (13,)]


@pytest.mark.parametrize("chunk", [4, 9, 1000])
def test_update_matches_torch_adamw_in_float64(chunk):
    g = torch.Generator().manual_seed(1)
    params = [torch.randn(s, generator=g, dtype=torch.float64) for s in shapes()]
    init = [p.clone() for p in params]
    grads = [[torch.randn(s, generator=g, dtype=torch.float64) for s in shapes()] for _ in range(5)]
    opt = StreamedAdamW(params, HYPER, chunk=chunk, alloc="pageable", overlap_backward=False,
                        master_dtype=torch.float64)
    try:
        assert opt.host_bytes() == 3 * 8 * sum(p.numel() for p in params)
        step_with(opt, params, grads)
        ref, ref_opt = reference_steps(init, grads)
        for i, (p, r) in enumerate(zip(params, ref)):
            torch.testing.assert_close(p, r.detach(), rtol=1e-12, atol=1e-14)
            off = opt.offsets[i]
            st = ref_opt.state[r]
            torch.testing.assert_close(opt.host["master"].tensor[off:off + p.numel()], r.detach().reshape(-1),
                                       rtol=1e-12, atol=1e-14)
            torch.testing.assert_close(opt.host["exp_avg"].tensor[off:off + p.numel()], st["exp_avg"].reshape(-1),
                                       rtol=1e-12, atol=1e-14)
            torch.testing.assert_close(opt.host["exp_avg_sq"].tensor[off:off + p.numel()],
                                       st["exp_avg_sq"].reshape(-1), rtol=1e-12, atol=1e-14)
        assert opt.step_no == 5
    finally:
        opt.release()


def test_backward_hooks_start_chunks_during_backward_same_result():
    """The hook path (chunks launched as gradients are accumulated) gives the reference's result."""
    from numabench.families.train_step.model import build_model, lm_loss

    torch.manual_seed(0)
    batches = [torch.randint(0, 512, (2, 65)) for _ in range(3)]
    nets = [build_model("tiny", seed=3).double() for _ in range(2)]
    opt = StreamedAdamW(list(nets[0].parameters()), HYPER, chunk=3000, alloc="pageable", overlap_backward=True,
                        master_dtype=torch.float64)
    ref = torch.optim.AdamW(nets[1].parameters(), lr=HYPER.lr, betas=HYPER.betas, eps=HYPER.eps,
                            weight_decay=HYPER.weight_decay, foreach=False)
    launched_in_backward = []
    inner = opt._launch

    def spy(k):
        launched_in_backward.append(torch.is_grad_enabled() and opt.step_no_for_hooks is not None)
        inner(k)

    opt._launch = spy
    try:
        for b in batches:
            launched_in_backward.clear()
            opt.begin_backward()
            lm_loss(nets[0](b[:, :-1]), b[:, 1:]).backward()
            n_before_step = len(launched_in_backward)
            opt.step()
            opt.zero_grad()
            assert n_before_step == len(opt.chunks)  # every chunk started from a hook, none left for step()
            lm_loss(nets[1](b[:, :-1]), b[:, 1:]).backward()
            ref.step()
            ref.zero_grad()
        for p, r in zip(nets[0].parameters(), nets[1].parameters()):
            torch.testing.assert_close(p, r, rtol=1e-10, atol=1e-12)
    finally:
        opt.release()


def test_bf16_weights_fp32_master():
    """bf16 working weights: the master (fp32, on the host) follows AdamW over the widened bf16
    gradients, and the weights are the master rounded to bf16."""
    g = torch.Generator().manual_seed(2)
    params = [torch.randn(s, generator=g).to(torch.bfloat16) for s in shapes()]
    init = [p.float() for p in params]
    grads = [[torch.randn(s, generator=g).to(torch.bfloat16) for s in shapes()] for _ in range(4)]
    opt = StreamedAdamW(params, HYPER, chunk=6, alloc="pageable", overlap_backward=False)
    try:
        assert opt.host["master"].tensor.dtype == torch.float32
        step_with(opt, params, grads)
        ref, _ = reference_steps(init, grads)
        for i, (p, r) in enumerate(zip(params, ref)):
            off = opt.offsets[i]
            master = opt.host["master"].tensor[off:off + p.numel()]
            torch.testing.assert_close(master.double(), r.detach().reshape(-1), rtol=1e-5, atol=1e-6)
            assert torch.equal(p.reshape(-1), master.to(torch.bfloat16))
    finally:
        opt.release()


def test_cpu_chunk_update_is_adamw_and_rejects_adam():
    g = torch.Generator().manual_seed(3)
    p, gr = torch.randn(50, generator=g, dtype=torch.float64), torch.randn(50, generator=g, dtype=torch.float64)
    m, v = torch.zeros_like(p), torch.zeros_like(p)
    ref, _ = reference_steps([p], [[gr]])
    torch_adamw_chunk_(p, gr, m, v, lr=HYPER.lr, beta1=0.9, beta2=0.95, eps=HYPER.eps, weight_decay=0.1, step=1)
    torch.testing.assert_close(p, ref[0].detach(), rtol=1e-12, atol=1e-14)
    with pytest.raises(ValueError, match="AdamW only"):
        torch_adamw_chunk_(p, gr, m, v, lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.0, step=1,
                           adamw=False)


def test_missing_gradient_names_the_chunk():
    params = [torch.zeros(4), torch.zeros(4)]
    opt = StreamedAdamW(params, HYPER, chunk=4, alloc="pageable", overlap_backward=False)
    try:
        params[0].grad = torch.ones(4)
        with pytest.raises(RuntimeError, match="without a gradient"):
            opt.step()
    finally:
        opt.release()


def test_host_state_is_placed_and_reported():
    """The host state is touched pages of this process (move_pages sees every one on a node)."""
    from numabench.numa.placement import pages_report

    params = [torch.randn(300_000)]
    opt = StreamedAdamW(params, HYPER, chunk=1 << 16, alloc="pageable", overlap_backward=False)
    try:
        rep = pages_report(opt.host_ranges())
        assert rep.untouched_bytes == 0
        assert sum(rep.bytes_by_node.values()) >= 3 * 4 * 300_000
        assert opt.pcie_bytes_per_step() == 2 * 3 * 4 * 300_000
    finally:
        opt.release()


def test_trainer_streamed_mode_learns_on_the_cpu():
    from numabench.families.train_step.worker import Trainer

    tr = Trainer("streamed", "tiny", "fp32", 2, "cpu")
    try:
        fixed = tr.pool[0]
        losses = [float(tr.step(fixed)) for _ in range(4)]
        assert losses[-1] < losses[0], losses
        parts = tr.step_parts()
        assert set(parts) == {"forward", "backward", "optimizer"} and all(v >= 0 for v in parts.values())
        ranges = tr.host_state_ranges()
        assert sum(n for _, n in ranges) == 3 * 4 * tr.n_params
    finally:
        tr.streamed.release()


def test_trainer_streamed_matches_adamw_trainer_loss_curve():
    """Same loss curve as torch's AdamW (the no-offload mode's optimizer) within tolerance."""
    from numabench.families.train_step.worker import Trainer

    curves = {}
    for mode in ("streamed", "no-offload"):
        tr = Trainer(mode, "tiny", "fp32", 2, "cpu")
        curves[mode] = [float(tr.step(tr.pool[i % 4])) for i in range(6)]
        if tr.streamed is not None:
            tr.streamed.release()
    for a, b in zip(curves["streamed"], curves["no-offload"]):
        assert abs(a - b) <= 1e-4 * abs(b), curves


def test_pcie_model_and_modes():
    from numabench.families.train_step import MODES, pcie_bytes_per_param

    assert {"streamed", "no-offload"} <= set(MODES)
    assert pcie_bytes_per_param("streamed", "bf16") == 24.0
    assert pcie_bytes_per_param("no-offload", "bf16") == 0.0
    assert pcie_bytes_per_param("deepspeed-zero2", "bf16") == 6.0
    with pytest.raises(ValueError, match="allowed"):
        pcie_bytes_per_param("zero9", "bf16")


# -- GPU (.ci/gpu-offload runs these) ------------------------------------------------
gpu = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_gpu_streamed_update_matches_torch_adamw(dtype):
    """Our fused kernel on streamed chunks (pinned host state, three streams, staging slots reused)
    against torch.optim.AdamW in float64 over the same gradients."""
    wd = torch.float32 if dtype == "fp32" else torch.bfloat16
    g = torch.Generator().manual_seed(5)
    sizes = [(1000, 37), (5,), (3000,), (1,), (70_001,)]
    host = [torch.randn(s, generator=g) for s in sizes]
    params = [t.to("cuda", wd) for t in host]
    init = [p.float().cpu() for p in params]
    grads = [[torch.randn(s, generator=g).to(wd) for s in sizes] for _ in range(4)]
    opt = StreamedAdamW(params, HYPER, chunk=8192, alloc="register", overlap_backward=False)
    try:
        step_with(opt, params, grads, device="cuda")
        torch.cuda.synchronize()
        ref, _ = reference_steps(init, [[x.float() for x in gs] for gs in grads])
        for i, (p, r) in enumerate(zip(params, ref)):
            off = opt.offsets[i]
            master = opt.host["master"].tensor[off:off + p.numel()].double()
            err = float((master - r.detach().reshape(-1)).norm() / r.detach().norm())
            assert err < 1e-5, (i, err)
            assert torch.equal(p.reshape(-1).cpu(), master.float().to(wd))
    finally:
        opt.release()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_streamed_loss_curve_matches_fused_adamw():
    """The same loss curve as torch's fused AdamW with all state on the GPU (fp32, tiny model),
    with chunks launched from the backward hooks."""
    from numabench.families.train_step.worker import Trainer

    curves = {}
    for mode in ("streamed", "no-offload"):
        tr = Trainer(mode, "tiny", "fp32", 4, "cuda:0")
        curves[mode] = [float(tr.step(tr.pool[i % 4])) for i in range(8)]
        if tr.streamed is not None:
            assert tr.streamed.overlap_backward
            tr.streamed.release()
    for a, b in zip(curves["streamed"], curves["no-offload"]):
        assert abs(a - b) <= 2e-3 * abs(b), curves


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("model", ["tiny", "small"])
def test_gpu_streamed_mode_placed_and_broken_down(model, monkeypatch):
    """The mode through the worker: the model learns (set-up check), its host state (master and
    both moments, 12 B per parameter) placed as the policy says, the rank under the case's
    policy, the step broken down."""
    from numabench.cases import Case
    from numabench.families import family
    from numabench.machine.capabilities import probe
    from numabench.machine.topology import discover
    from numabench.numa.policy import Policy
    from numabench.workers.run import run_case

    monkeypatch.setenv("NUMABENCH_PROFILE_IDLE", "1")  # the workers measure the GPU's idle share
    topo = discover("/")
    caps = probe(first_node=(topo.memory_node_ids or (0,))[0])
    fam = family("train_step")
    c = Case("train_step", 1, 4, Policy.parse("local"), "bf16", (("mode", "streamed"), ("model", model)))
    res = run_case(c, fam, topo, caps, rounds=3, warmup=1, timeout_s=900)
    info = res.setup_info[0]
    assert info.placed == "host state" and info.host_state_bytes == 12 * info.n_params
    assert info.mempolicy["mode"] == "bind"
    assert all(p.verdict is None or p.verdict.ok for p in res.placement), [p.to_dict() for p in res.placement]
    m = fam.metrics(res, "step")
    assert m["pcie_bytes_per_param"] == 24.0 and m["forward_ms"] > 0 and m["backward_ms"] > 0
    # the registered host state is pinned, and counted so per node (numa_maps' pinned mappings)
    pinned = sum(int(v) for v in m["host_pinned_bytes_by_node_per_rank"][0].values())
    assert pinned >= 12 * info.n_params, (pinned, info.n_params)
    assert m["mem_peak_per_rank_bytes"][0] <= m["mem_peak_reserved_per_rank_bytes"][0]
    assert 0 <= m["gpu_idle_fraction"] < 1 and m["sm_idle_fraction"] >= m["gpu_idle_fraction"], m
    assert m["optimizer_ms"] >= 0 and "overlapped with backward" in m["impl"]


def test_streamed_and_no_offload_modes_through_the_worker_on_the_cpu():
    """The modes end to end on a CPU-only machine (tiny, fp32, one rank, bound to a node): the model
    learns, the streamed host state (12 B per parameter) is placed as the policy says, the rank ran
    under the case's policy, and every entry has its step broken down."""
    from numabench.cases import Case
    from numabench.families import family
    from numabench.machine.capabilities import probe
    from numabench.machine.topology import discover
    from numabench.numa.policy import Policy
    from numabench.workers.run import run_case

    topo = discover("/")
    if topo.gpus:
        pytest.skip("this machine has GPUs: see test_gpu_streamed_mode_placed_and_broken_down")
    node = (topo.memory_node_ids or (0,))[0]
    caps = probe(first_node=node)
    fam = family("train_step")
    for mode in ("streamed", "no-offload"):
        c = Case("train_step", 1, 4, Policy.parse(f"bind:{node}"), "fp32", (("mode", mode), ("model", "tiny")))
        res = run_case(c, fam, topo, caps, rounds=3, warmup=1, timeout_s=300)
        info = res.setup_info[0]
        assert info.mempolicy["mode"] == "bind" and info.mempolicy["nodes"] == [node]
        assert all(p.verdict is not None and p.verdict.ok for p in res.placement), [p.to_dict() for p in res.placement]
        m = fam.metrics(res, "step")
        assert m["forward_ms"] > 0 and m["backward_ms"] > 0 and m["optimizer_ms"] > 0, m
        assert m["pcie_bytes_per_param"] == (24.0 if mode == "streamed" else 0.0)
        if mode == "streamed":
            assert info.placed == "host state" and info.host_state_bytes == 12 * info.n_params


class RecordingOps:
    """CPU ops that log, per stream, each event recorded and each event waited on."""
    cuda = False

    def __init__(self):
        self.log = []
        self.n = 0

    def stream(self):
        self.n += 1
        return f"s{self.n}"

    def use(self, stream):
        import contextlib

        return contextlib.nullcontext()

    def record(self, stream=None):
        ev = ("ev", len(self.log), stream)
        self.log.append(("record", stream, ev))
        return ev

    def wait(self, stream, event):
        self.log.append(("wait", stream, event))

    def join(self, stream):
        self.log.append(("join", stream, None))


@pytest.mark.parametrize("sizes,chunk", [([10], 100), ([10, 10], 10), ([4] * 8, 4)])
def test_a_chunks_copy_in_waits_for_its_last_copy_back(sizes, chunk):
    """Each step's copy in of a chunk waits (on the H2D stream) for the event after that chunk's
    copy back in the step before, also with fewer chunks than staging slots."""
    params = [torch.zeros(n) for n in sizes]
    opt = StreamedAdamW(params, HYPER, chunk=chunk, alloc="pageable", overlap_backward=False)
    ops = opt.ops = RecordingOps()
    opt.h2d, opt.comp, opt.d2h = "h2d", "comp", "d2h"
    try:
        written = {}
        for step in range(3):
            for p in params:
                p.grad = torch.ones_like(p)
            mark = len(ops.log)
            opt.step()
            opt.zero_grad()
            new = ops.log[mark:]
            # per launch, in order: h2d waits, then its record; the d2h record closes the launch
            h2d_waits, launch = [], 0
            order = [k for k in range(len(opt.chunks))]  # step() launches chunks in plan order
            for kind, stream, ev in new:
                if kind == "wait" and stream == "h2d":
                    h2d_waits.append(ev)
                elif kind == "record" and stream == "h2d":
                    k = order[launch]
                    if step:
                        assert written[k] in h2d_waits, (step, k)
                    h2d_waits = []
                elif kind == "record" and stream == "d2h":
                    written[order[launch]] = ev
                    launch += 1
            assert launch == len(opt.chunks)
    finally:
        opt.release()
