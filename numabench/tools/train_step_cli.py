"""torchrun entry point for the train_step family's model and step (same code: families.train_step.worker.Trainer).

    torchrun --nproc-per-node 8 [--nnodes 2 --rdzv-endpoint HOST:PORT] -m numabench.tools.train_step_cli \\
        --mode fsdp-offload --model small --batch 4 --dtype bf16 --steps 20 --warmup 3 --numa-policy local

One process per GPU (LOCAL_RANK), NCCL; without CUDA, gloo on the CPU. With
``--numa-policy`` each process applies the policy to itself at start (``local``:
its GPU's NUMA node, CPUs and memory; any other numabench policy string:
memory only) before the model is built, so the host state it allocates is
placed by it. Rank 0 prints one JSON object like the seed 004 tables:
throughput (tokens/s) and time per step mean/std over the timed steps, model
TFLOPS, peak GPU memory per rank (allocated and reserved), host memory per node per rank
(anonymous, the whole process as numastat -p counts it, and its pinned share).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys


def apply_numa(policy_text: str, local_rank: int, cuda: bool) -> str:
    from numabench.machine.topology import discover
    from numabench.numa import launch
    from numabench.numa.policy import Policy

    topo = discover("/")
    own = None
    if cuda and topo.gpus:
        own = topo.gpu(local_rank).numa_node
    elif topo.cpu_node_ids:
        own = topo.cpu_node_ids[0]
    policy = Policy.parse(policy_text).resolve(topo, own)
    cpus = None
    if Policy.parse(policy_text).kind == "local" and own is not None:
        cpus = topo.node(topo.nearest_cpu_node(own)).cpus
    launch.apply(policy, cpus)
    return str(policy)


def main(argv: list[str] | None = None) -> int:
    from numabench.families.train_step.worker import MODES

    ap = argparse.ArgumentParser(prog="python -m numabench.tools.train_step_cli", description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=MODES, default="ddp")
    ap.add_argument("--model", default="tiny", help="numabench.families.train_step.configs.MODELS: tiny, small, 1b, 5b")
    ap.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    ap.add_argument("--batch", type=int, default=4, help="sequences per rank per step")
    ap.add_argument("--steps", type=int, default=10, help="timed steps")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--numa-policy", default=None, help="e.g. local, bind:0, interleave:0,1")
    ap.add_argument("--json", default=None, help="also write rank 0's result here")
    ns = ap.parse_args(argv)
    if ns.steps < 1 or ns.batch < 1 or ns.warmup < 0:
        ap.error("--steps and --batch must be >= 1, --warmup >= 0")

    import torch
    import torch.distributed as dist

    from numabench.families.train_step.worker import Trainer, anon_report, host_memory

    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    cuda = torch.cuda.is_available()
    policy = apply_numa(ns.numa_policy, local_rank, cuda) if ns.numa_policy else "default"
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if "RANK" in os.environ:
        dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank() if dist.is_initialized() else 0
    world = dist.get_world_size() if dist.is_initialized() else 1
    tr = Trainer(ns.mode, ns.model, ns.dtype, ns.batch, device, data_seed=rank)
    for _ in range(ns.warmup):
        tr.step()
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    times = []
    for _ in range(ns.steps):
        if dist.is_initialized():
            dist.barrier()
        times.append(tr.timed_step())
    memory = host_memory(device if cuda else None)
    mine = {"rank": rank, "times": times, "policy": policy,
            "peak_gpu_bytes": torch.cuda.max_memory_allocated(device) if cuda else None,
            "peak_gpu_reserved_bytes": torch.cuda.max_memory_reserved(device) if cuda else None,
            "host_bytes_by_node": anon_report().bytes_by_node,
            "process_bytes_by_node": memory["numa_maps"].bytes_by_node,
            "pinned_bytes_by_node": memory["pinned"].bytes_by_node}
    allr = [mine]
    if dist.is_initialized():
        allr = [None] * world
        dist.all_gather_object(allr, mine)
    if rank == 0:
        step_t = [max(r["times"][i] for r in allr) for i in range(ns.steps)]  # slowest rank bounds a step
        tps = [tr.tokens_per_step / t for t in step_t]
        tf = [6 * tr.n_params * tr.tokens_per_step / t / 1e12 for t in step_t]
        sd = lambda v: statistics.stdev(v) if len(v) > 1 else 0.0  # noqa: E731
        out = {"mode": ns.mode, "impl": tr.impl, "model": ns.model, "n_params": tr.n_params, "dtype": ns.dtype,
               "world_size": world, "batch_per_rank": ns.batch, "tokens_per_step": tr.tokens_per_step,
               "numa_policy": [r["policy"] for r in allr],
               "throughput_mean": statistics.mean(tps), "throughput_std": sd(tps),
               "time_per_step_mean": statistics.mean(step_t), "time_per_step_std": sd(step_t),
               "tflops_mean": statistics.mean(tf), "tflops_std": sd(tf),
               "mem_peak_per_rank_bytes": [r["peak_gpu_bytes"] for r in allr],
               "mem_peak_reserved_per_rank_bytes": [r["peak_gpu_reserved_bytes"] for r in allr],
               "pinned_bytes_by_node_per_rank": [r["pinned_bytes_by_node"] for r in allr],
               "host_bytes_by_node_per_rank": [r["host_bytes_by_node"] for r in allr],
               "process_bytes_by_node_per_rank": [r["process_bytes_by_node"] for r in allr]}
        text = json.dumps(out, indent=2, default=str)
        print(text, flush=True)
        if ns.json:
            with open(ns.json, "w") as f:
                f.write(text)
    if dist.is_initialized():
        dist.barrier()  # rank 0 hosts the store: nobody leaves while another still talks to it
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()
    # Its process group is destroyed and its result written: leave without the interpreter's
    # finalisation, in which torch's distributed C++ threads can still abort a rank (SIGABRT,
    # "terminate called without an active exception": once in CI, rank 1 of 2, after the JSON).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
