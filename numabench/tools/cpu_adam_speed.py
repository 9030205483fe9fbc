"""Speed of our CPU Adam step vs torch's CPU Adam, with a memory-bandwidth ceiling.

    python -m numabench.tools.cpu_adam_speed --numel 16777216 --threads 1,2

Everything runs in ONE process so the rows are comparable on a noisy machine.
Times are the median of ``--repeats`` (>= 20) runs after warm-up.  GB/s counts
the bytes the algorithm must move, without write-allocate (read-for-ownership)
traffic:

* Adam fp32: 28 B/elem (read p, g, m, v; write p, m, v), +2 with a bf16 copy-out.
* triad ``a = b + s*c``: 12 B/elem;  copy ``a = b``: 8 B/elem;
* in-place add ``b += s*c``: 12 B/elem;  in-place scale ``b *= s``: 8 B/elem.

Adam writes only lines it has just read, so its real traffic equals the counted
traffic; triad and copy really move 16 and 12 B/elem (their written lines are
read for ownership first), so in these units they understate the bandwidth
(real traffic is 4/3 resp. 3/2 of the count).  The in-place rows write only
lines they just read, like Adam, so counted = real: they are the fair ceiling.
The "% of bandwidth" line uses the best of the four bandwidth rows.

``measure()`` returns the rows as a list of dicts; only ``__main__`` prints.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from typing import Dict, List, Sequence

BYTES_ADAM = 28
BYTES_COPY_OUT_BF16 = 2
BYTES_TRIAD = 12
BYTES_COPY = 8
BANDWIDTH_ROWS = ("triad a=b+s*c (torch)", "copy a=b (torch)", "in-place add b+=c (torch)",
                  "in-place scale b*=s (torch)", "adam_pattern 4 reads 3 writes (csrc/stream.cpp)")


def measure(numel: int = 1 << 24, threads: Sequence[int] = (1, 2), repeats: int = 20,
            warmup: int = 3) -> List[Dict]:
    """Time every variant for each thread count; returns one dict per (variant, threads)
    with keys variant, threads, ms, bytes_per_elem, gbps, numel, simd."""
    import torch

    from numabench.kernels import cpu_adam

    if repeats < 20:
        raise ValueError(f"repeats={repeats}; use >= 20 for a stable median")
    cpu_adam.load()
    simd = cpu_adam.simd_level()
    gen = torch.Generator().manual_seed(0)

    def rnd(scale=1.0):
        return torch.randn(numel, generator=gen) * scale

    lr, wd = 1e-4, 0.0
    # Ours.
    p, g = rnd(), rnd(0.1)
    m, v = rnd(0.01), torch.rand(numel, generator=gen) * 0.01 + 1e-4
    copy_bf16 = torch.empty(numel, dtype=torch.bfloat16)
    # torch.optim, each with its own param/grad/state (same sizes).
    def make_opt(**kw):
        tp = torch.nn.Parameter(rnd())
        tp.grad = rnd(0.1)
        opt = torch.optim.Adam([tp], lr=lr, weight_decay=wd, **kw)
        opt.step()  # allocates the state
        return tp, opt

    fused_p, fused_opt = make_opt(fused=True)
    fe_p, fe_opt = make_opt(foreach=True)
    fused_copy = torch.empty(numel, dtype=torch.bfloat16)
    # STREAM-style arrays (a fourth for Adam's 4-read/3-write pattern).
    a, b, c, d = torch.empty(numel), rnd(), rnd(), rnd(0.01)
    from numabench.kernels import stream

    step = [1]

    def ours(copy_out=None, nt=0, schedule="static"):
        def fn():
            os.environ[cpu_adam.SCHEDULE_ENV] = schedule  # read by the kernel at every call
            cpu_adam.adam_step_(p, g, m, v, lr=lr, weight_decay=wd, step=step[0],
                                param_copy_out=copy_out, num_threads=nt)
            step[0] += 1
        return fn

    def fused_then_copy():
        fused_opt.step()
        fused_copy.copy_(fused_p.detach())

    rows = []
    old_threads = torch.get_num_threads()
    old_schedule = os.environ.get(cpu_adam.SCHEDULE_ENV)
    try:
        for nt in threads:
            torch.set_num_threads(nt)
            variants = [
                ("triad a=b+s*c (torch)", BYTES_TRIAD, lambda: torch.add(b, c, alpha=0.5, out=a)),
                ("copy a=b (torch)", BYTES_COPY, lambda: a.copy_(b)),
                ("in-place add b+=c (torch)", BYTES_TRIAD, lambda: b.add_(c, alpha=1e-6)),
                ("in-place scale b*=s (torch)", BYTES_COPY, lambda: b.mul_(1.0 - 1e-7)),
                ("adam_pattern 4 reads 3 writes (csrc/stream.cpp)", BYTES_ADAM,
                 lambda: stream.run("adam_pattern", a, b, c, d, threads=nt)),
                ("ours adam_step_", BYTES_ADAM, ours(None, nt)),
                ("ours, dynamic schedule", BYTES_ADAM, ours(None, nt, "dynamic")),
                ("torch Adam fused=True", BYTES_ADAM, fused_opt.step),
                ("torch Adam foreach=True", BYTES_ADAM, fe_opt.step),
                ("ours + bf16 copy-out", BYTES_ADAM + BYTES_COPY_OUT_BF16, ours(copy_bf16, nt)),
                ("torch fused + copy_ to bf16", BYTES_ADAM + BYTES_COPY_OUT_BF16, fused_then_copy),
            ]
            # Interleaved rounds (every variant once per round) so that the noise of
            # a shared machine hits all variants alike; median per variant.
            times = {name: [] for name, _, _ in variants}
            for r in range(warmup + repeats):
                for name, _, fn in variants:
                    t0 = time.perf_counter()
                    fn()
                    dt = time.perf_counter() - t0
                    if r >= warmup:
                        times[name].append(dt)
            for name, bpe, _ in variants:
                ms = statistics.median(times[name]) * 1e3
                q1, _, q3 = statistics.quantiles(times[name], n=4)
                rows.append(dict(variant=name, threads=nt, ms=ms, bytes_per_elem=bpe,
                                 gbps=numel * bpe / (ms * 1e-3) / 1e9, numel=numel, simd=simd,
                                 iqr_pct=(q3 - q1) * 1e3 / ms * 100))
    finally:
        torch.set_num_threads(old_threads)
        if old_schedule is None:
            os.environ.pop(cpu_adam.SCHEDULE_ENV, None)
        else:
            os.environ[cpu_adam.SCHEDULE_ENV] = old_schedule
    return rows


def format_table(rows: List[Dict]) -> str:
    """Markdown table plus the ratios the goals are about, per thread count."""
    out = ["| threads | variant | ms (median) | IQR % of median | B/elem | GB/s |", "|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['threads']} | {r['variant']} | {r['ms']:.2f} | {r['iqr_pct']:.1f} | {r['bytes_per_elem']} "
                   f"| {r['gbps']:.1f} |")
    out.append("")
    for nt in sorted({r["threads"] for r in rows}):
        by = {r["variant"]: r for r in rows if r["threads"] == nt}
        ceiling = max(r["gbps"] for r in by.values() if r["variant"] in BANDWIDTH_ROWS)
        ours = by["ours adam_step_"]
        out.append(
            f"threads={nt}: ours vs torch fused = "
            f"{by['torch Adam fused=True']['ms'] / ours['ms']:.2f}x (speed-up); "
            f"ours = {ours['gbps'] / ceiling * 100:.0f}% of the best bandwidth row ({ceiling:.1f} GB/s); "
            f"dynamic schedule vs static = {by['ours, dynamic schedule']['ms'] / ours['ms']:.3f}x the time; "
            f"ours+bf16 copy vs torch fused+copy_ = "
            f"{by['torch fused + copy_ to bf16']['ms'] / by['ours + bf16 copy-out']['ms']:.2f}x")
    return "\n".join(out)


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--numel", type=int, default=1 << 24)
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args(argv)
    threads = [int(t) for t in args.threads.split(",") if t.strip()]
    rows = measure(args.numel, threads, args.repeats, args.warmup)
    import torch

    print(f"numel={args.numel} ({args.numel * 4 / 2**20:.0f} MiB per fp32 tensor, "
          f"{args.numel * 16 / 2**20:.0f} MiB of Adam state+param+grad), simd={rows[0]['simd']}, "
          f"torch {torch.__version__}, {_cpu_name()}, {os.cpu_count()} CPUs, "
          f"median of {args.repeats} interleaved runs after {args.warmup} warm-up")
    print("GB/s counts algorithmic bytes only (Adam 28 B/elem, +2 for the bf16 copy; triad 12; "
          "copy 8); write-allocate (RFO) traffic is NOT counted.")
    print(format_table(rows))


if __name__ == "__main__":
    main()
