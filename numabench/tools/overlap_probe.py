"""Which overlapped-step schedule gets nearest the PCIe bound (GPU machine).

    python -m numabench.tools.overlap_probe --numel 545259520 --dtype fp32 --rounds 8

One process, one GPU, the adam_offload worker's own placed state and ceilings;
every schedule variant runs once per round, interleaved, so the medians are
comparable on a shared machine.  Before anything is timed each variant runs
one step at ``--check-numel`` from the same start state as a serial step and
must give bit-identical host tensors.

The schedules and their knobs are numabench.families.adam_offload.schedule's (the
worker's ``schedule=overlap`` is ``Schedule(chunk)``); ``huge`` allocates the host
state with MADV_HUGEPAGE before first touch.

``measure()`` returns rows; only ``__main__`` prints.
"""
from __future__ import annotations

import argparse
import dataclasses
import mmap
import statistics
import time
from typing import Sequence

from numabench.families.adam_offload.schedule import IN_NAMES as NAMES
from numabench.families.adam_offload.schedule import OUT_NAMES, OverlappedStep, Schedule


def _huge_buffer(numel: int, dtype):
    """mmap + MADV_HUGEPAGE + first touch + cudaHostRegister."""
    import ctypes

    import torch

    from numabench.toolkit.hostmem import HostBuffer

    itemsize = torch.empty((), dtype=dtype).element_size()
    nbytes = numel * itemsize
    buf = mmap.mmap(-1, nbytes)
    buf.madvise(mmap.MADV_HUGEPAGE)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    ctypes.memset(addr, 0x3C, nbytes)
    err = torch.cuda.cudart().cudaHostRegister(addr, nbytes, 0)
    if int(err) != 0:
        raise RuntimeError(f"cudaHostRegister({nbytes} bytes) failed with CUDA error {int(err)}")
    return HostBuffer(torch.frombuffer(buf, dtype=dtype, count=numel), addr, nbytes, "register", [buf])


def _make_worker(numel: int, dtype: str, gpu: int):
    from numabench.families.adam_offload.worker import Worker

    w = Worker({"numel": numel, "dtype": dtype, "gpu": gpu, "rank": 0,
                "variants": [{"impl": "ours", "schedule": "serial", "alloc": "register"}]})
    info = w.setup()
    return w, info


def _huge_host(w) -> dict:
    host = {n: _huge_buffer(w.numel, w.dtype) for n in NAMES}
    for n in NAMES:
        host[n].tensor.copy_(w.host[n].tensor)
    return host


def check_bit_identical(schedules: Sequence[Schedule], numel: int, dtype: str, gpu: int = 0) -> dict[str, str]:
    """Each schedule's step vs the serial step from the same start state:
    ``identical``, ``DIFFERENT`` or the error it raised."""

    w, _ = _make_worker(numel, dtype, gpu)
    try:
        start = {n: w.host[n].tensor.clone() for n in NAMES}
        fn = w.impls["ours"]

        def reset():
            for n in NAMES:
                w.host[n].tensor.copy_(start[n])
            w.step_no = 0

        reset()
        w.step({"schedule": "serial"})
        want = {n: w.host[n].tensor.clone() for n in OUT_NAMES}
        out = {}
        for sched in schedules:
            reset()
            host = w.host
            if sched.huge:
                host = _huge_host(w)
            w.step_no += 1
            try:
                OverlappedStep(w.device, dataclasses.replace(sched, chunk=min(sched.chunk, max(1, numel // 5))),
                               host, w.dev).run(fn, w._hyper())
                diff = sum(int((host[n].tensor != want[n]).sum()) for n in OUT_NAMES)
                out[sched.label()] = "identical" if diff == 0 else f"DIFFERENT in {diff} elements"
            except Exception as e:  # noqa: BLE001 -- reported per schedule, the others still run
                out[sched.label()] = f"{type(e).__name__}: {e}"
            if sched.huge:
                for b in host.values():
                    b.release()
        return out
    finally:
        w.close()


def bidir_ceiling(w, nbytes: int) -> tuple[float, float]:
    """Best H2D and D2H GB/s while both directions copy ``nbytes`` at once (the
    worker's own ceiling uses 256 MiB; this shows whether a larger buffer gets less)."""
    import torch

    from numabench.families.adam_offload.worker import bidir_copy_seconds
    from numabench.toolkit.hostmem import allocate

    ha, hb = allocate(nbytes // 4, torch.float32, "register"), allocate(nbytes // 4, torch.float32, "register")
    da = torch.empty(nbytes // 4, dtype=torch.float32, device=w.device)
    db = torch.empty_like(da)
    try:
        t_h2d, t_d2h = bidir_copy_seconds(da, ha.tensor, hb.tensor, db,
                                          (torch.cuda.Stream(w.device), torch.cuda.Stream(w.device)))
    finally:
        del da, db
        ha.release()
        hb.release()
    return nbytes / t_h2d / 1e9, nbytes / t_d2h / 1e9


def measure(numel: int, dtype: str, schedules: Sequence[Schedule], rounds: int = 8, gpu: int = 0) -> dict:
    """Median step time per schedule (plus serial) and the run's ceilings."""
    w, info = _make_worker(numel, dtype, gpu)
    try:
        item = w.host["param"].tensor.element_size()
        fn = w.impls["ours"]
        huge_host = _huge_host(w) if any(s.huge for s in schedules) else None
        pipes = {s.label(): OverlappedStep(w.device, s, huge_host if s.huge else w.host, w.dev) for s in schedules}
        times: dict[str, list[float]] = {"serial": [], **{k: [] for k in pipes}}
        for r in range(rounds + 2):
            w.step_no += 1
            t = w.step({"schedule": "serial"})["step"]
            if r >= 2:
                times["serial"].append(t)
            for label, p in pipes.items():
                w.step_no += 1
                t = p.run(fn, w._hyper())["step"]
                if r >= 2:
                    times[label].append(t)
        bound = max(4 * numel * item / (info.limit_h2d_GBps * 1e9), 3 * numel * item / (info.limit_d2h_GBps * 1e9))
        rows = []
        serial = statistics.median(times["serial"])
        for label, ts in times.items():
            med = statistics.median(ts)
            rows.append({"schedule": label, "median_ms": med * 1e3, "min_ms": min(ts) * 1e3,
                         "max_ms": max(ts) * 1e3, "ratio_to_bound": med / bound, "speedup_vs_serial": serial / med})
        big = bidir_ceiling(w, 2 << 30)
        anon_huge_kb = _meminfo("AnonHugePages")
        if huge_host:
            for b in huge_host.values():
                b.release()
        return {"rows": rows, "bound_ms": bound * 1e3, "numel": numel, "dtype": dtype,
                "limits": {k: round(v, 2) for k, v in info.to_dict().items() if k.startswith("limit_")},
                "bidir_2GiB": [round(x, 2) for x in big], "AnonHugePages_kB_during": anon_huge_kb,
                "thp": _thp()}
    finally:
        w.close()


def _meminfo(key: str) -> int | None:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return None


def _thp() -> str:
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return f.read().strip()
    except OSError as e:
        return f"unreadable ({e})"


def parse_schedules(text: str, default_chunk: int) -> list[Schedule]:
    """``;``-separated schedules of ``key=value`` pairs joined by ``,``; e.g.
    ``chunk=8388608;chunk=2097152,d2h_group=4;h2d_engine=sm``."""
    fields = {f.name: f.type for f in dataclasses.fields(Schedule)}
    out = []
    for spec in filter(None, (s.strip() for s in text.split(";"))):
        kw: dict = {"chunk": default_chunk}
        for pair in filter(None, spec.split(",")):
            key, _, value = pair.partition("=")
            if key not in fields:
                raise ValueError(f"unknown schedule key {key!r} in {spec!r}: allowed {', '.join(fields)}")
            if key in ("chunk", "d2h_group", "h2d_streams"):
                kw[key] = int(value)
            elif key in ("priority", "huge"):
                kw[key] = value.lower() in ("1", "true", "yes", "")
            else:
                if value not in ("ce", "sm"):
                    raise ValueError(f"{key}={value!r}: allowed ce, sm")
                kw[key] = value
        out.append(Schedule(**kw))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--numel", type=int, default=545259520)
    p.add_argument("--dtype", default="fp32", choices=("fp32", "bf16", "fp16"))
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--check-numel", type=int, default=1 << 23)
    p.add_argument("--schedules", default="chunk=2097152;chunk=8388608")
    args = p.parse_args(argv)
    import torch

    from numabench.families.adam_offload.worker import auto_chunk

    item = torch.empty((), dtype={"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]).element_size()
    schedules = parse_schedules(args.schedules, auto_chunk(args.numel, item))
    t0 = time.time()
    ok = check_bit_identical(schedules, args.check_numel, args.dtype)
    for label, verdict in ok.items():
        print(f"vs serial at {args.check_numel}: {verdict:28}  {label}")
    good = [s for s in schedules if ok[s.label()] == "identical"]
    res = measure(args.numel, args.dtype, good, args.rounds)
    print(f"numel {res['numel']} {res['dtype']}: unidirectional bound {res['bound_ms']:.1f} ms; limits {res['limits']}; "
          f"bidir at 2 GiB H2D/D2H {res['bidir_2GiB']} GB/s; THP {res['thp']}; AnonHugePages {res['AnonHugePages_kB_during']} kB")
    for r in res["rows"]:
        print(f"{r['schedule']:50} median {r['median_ms']:8.2f} ms (min {r['min_ms']:.2f} max {r['max_ms']:.2f}) "
              f"x bound {r['ratio_to_bound']:.3f}  speed-up vs serial {r['speedup_vs_serial']:.2f}x")
    print(f"total {time.time() - t0:.0f} s")
    return 0 if len(good) == len(schedules) else 1


if __name__ == "__main__":
    raise SystemExit(main())
