"""Which overlapped-step schedule gets nearest the PCIe bound (GPU machine).

    python -m numabench.tools.overlap_probe --numel 545259520 --dtype fp32 --rounds 8
    python -m numabench.tools.overlap_probe --numel 272629760 --nprocess 2   # two GPUs at once

One process per rank (``--nprocess``, rank r on GPU r, ``--numel`` elements each),
the adam_offload worker's own placed state and ceilings; every schedule variant
runs once per round, interleaved, so the medians are comparable on a shared
machine; ranks meet before every step (lockstep, as the benchmark drives them)
and a round's step is the slowest rank's.  Before anything is timed each variant runs
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


def _make_worker(numel: int, dtype: str, gpu: int, rank: int = 0, nprocess: int = 1):
    from numabench.families.adam_offload.worker import Worker

    w = Worker({"numel": numel, "dtype": dtype, "gpu": gpu, "rank": rank, "nprocess": nprocess,
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


def _rank_times(numel: int, dtype: str, schedules: Sequence[Schedule], rounds: int, rank: int = 0,
                nprocess: int = 1) -> dict:
    """One rank's step times per schedule (plus serial), its ceilings and bounds. With several
    ranks (rank r on GPU r), every rank's worker measures its ceilings with the others (the
    worker's meetings) and the ranks meet again before every timed step: lockstep, as the
    benchmark's parent drives them."""
    from numabench.families.adam_offload import duplex_bound_s, one_way_bound_s
    from numabench.toolkit.rank_barrier import meet

    w, info = _make_worker(numel, dtype, gpu=rank, rank=rank, nprocess=nprocess)
    try:
        item = w.host["param"].tensor.element_size()
        fn = w.impls["ours"]
        huge_host = _huge_host(w) if any(s.huge for s in schedules) else None
        pipes = {s.label(): OverlappedStep(w.device, s, huge_host if s.huge else w.host, w.dev, rank=rank,
                                           nprocess=nprocess) for s in schedules}
        times: dict[str, list[float]] = {"serial": [], **{k: [] for k in pipes}}
        for r in range(rounds + 2):
            for i, (label, p) in enumerate([("serial", None), *pipes.items()]):
                meet(f"probe-{r}-{i}", rank, nprocess)
                w.step_no += 1
                t = (w.step({"schedule": "serial"}) if p is None else p.run(fn, w._hyper()))["step"]
                if r >= 2:
                    times[label].append(t)
        h2d, d2h = 4 * numel * item, 3 * numel * item
        out = {"times": times, "bound_s": one_way_bound_s(h2d, d2h, info), "duplex_s": duplex_bound_s(h2d, d2h, info),
               "limits": {k: round(v, 2) for k, v in info.to_dict().items() if k.startswith("limit_")},
               "bidir_2GiB": [round(x, 2) for x in bidir_ceiling(w, 2 << 30)] if nprocess == 1 else None,
               "AnonHugePages_kB_during": _meminfo("AnonHugePages")}
        if huge_host:
            for b in huge_host.values():
                b.release()
        return out
    finally:
        w.close()


def _rank_main(scratch: str, queue, rank_fn, rank: int, args: tuple) -> None:
    """A spawned rank: ``rank_fn(*args)``, or the error it raised, into ``queue``."""
    import os

    from numabench.toolkit.rank_barrier import SCRATCH_ENV

    os.environ[SCRATCH_ENV] = scratch  # where the ranks meet
    try:
        queue.put((rank, rank_fn(*args)))
    except BaseException as e:  # noqa: BLE001 -- the parent reports it
        queue.put((rank, f"{type(e).__name__}: {e}"))


def _all_ranks(numel: int, dtype: str, schedules: Sequence[Schedule], rounds: int, nprocess: int,
               rank_fn=_rank_times) -> list[dict]:
    """``rank_fn`` (``_rank_times``) in one spawned process per rank; their results by rank."""
    import multiprocessing
    import tempfile

    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    with tempfile.TemporaryDirectory(prefix="numabench-probe-") as scratch:
        procs = [ctx.Process(target=_rank_main, args=(scratch, queue, rank_fn, r, (numel, dtype, schedules, rounds, r, nprocess)))
                 for r in range(nprocess)]
        for p in procs:
            p.start()
        try:
            got = {}
            while len(got) < nprocess:
                try:
                    rank, res = queue.get(timeout=5)
                except Exception:  # noqa: BLE001 -- queue.Empty: see whether a rank died
                    dead = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0) and r not in got]
                    if dead:
                        raise RuntimeError(f"probe rank(s) {dead} exited with {[procs[r].exitcode for r in dead]}")
                    continue
                if isinstance(res, str):
                    raise RuntimeError(f"probe rank {rank} failed: {res}")
                got[rank] = res
        finally:
            for p in procs:
                if p.is_alive():
                    p.kill()
                p.join()
    return [got[r] for r in range(nprocess)]


def measure(numel: int, dtype: str, schedules: Sequence[Schedule], rounds: int = 8, nprocess: int = 1) -> dict:
    """Median step time per schedule (plus serial) and the run's ceilings; ``numel`` per rank.
    With ``nprocess`` ranks in lockstep (GPUs 0..N-1) a round's step is the slowest rank's, and
    the bounds the slowest rank's, as the benchmark reports them."""
    ranks = [_rank_times(numel, dtype, schedules, rounds)] if nprocess == 1 else \
        _all_ranks(numel, dtype, schedules, rounds, nprocess)
    bound = max(r["bound_s"] for r in ranks)
    duplex = max(r["duplex_s"] for r in ranks)
    steps = {label: [max(r["times"][label][i] for r in ranks) for i in range(rounds)] for label in ranks[0]["times"]}
    serial = statistics.median(steps["serial"])
    rows = []
    for label, ts in steps.items():
        med = statistics.median(ts)
        rows.append({"schedule": label, "median_ms": med * 1e3, "min_ms": min(ts) * 1e3, "max_ms": max(ts) * 1e3,
                     "ratio_to_bound": med / bound, "ratio_to_duplex_bound": med / duplex,
                     "speedup_vs_serial": serial / med})
    return {"rows": rows, "bound_ms": bound * 1e3, "duplex_bound_ms": duplex * 1e3, "numel": numel, "dtype": dtype,
            "nprocess": nprocess, "limits": ranks[0]["limits"] if nprocess == 1 else [r["limits"] for r in ranks],
            "bidir_2GiB": ranks[0]["bidir_2GiB"], "AnonHugePages_kB_during": ranks[0]["AnonHugePages_kB_during"],
            "thp": _thp()}


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
            elif key in ("priority", "huge", "align_d2h"):
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
    p.add_argument("--nprocess", type=int, default=1,
                   help="ranks in lockstep, rank r on GPU r, each with --numel elements (default 1)")
    args = p.parse_args(argv)
    if args.nprocess < 1:
        p.error(f"--nprocess {args.nprocess}: allowed 1 or more")
    import torch

    from numabench.families.adam_offload.worker import auto_chunk

    if args.nprocess > torch.cuda.device_count():
        p.error(f"--nprocess {args.nprocess}: this machine has {torch.cuda.device_count()} CUDA GPU(s); "
                "rank r runs on GPU r, so allowed 1 to the GPU count")

    item = torch.empty((), dtype={"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]).element_size()
    schedules = parse_schedules(args.schedules, auto_chunk(args.numel, item))
    t0 = time.time()
    ok = check_bit_identical(schedules, args.check_numel, args.dtype)
    for label, verdict in ok.items():
        print(f"vs serial at {args.check_numel}: {verdict:28}  {label}")
    good = [s for s in schedules if ok[s.label()] == "identical"]
    res = measure(args.numel, args.dtype, good, args.rounds, nprocess=args.nprocess)
    print(f"numel {res['numel']} {res['dtype']} per rank, {res['nprocess']} rank(s): one-way bound {res['bound_ms']:.1f} ms, "
          f"duplex bound {res['duplex_bound_ms']:.1f} ms; limits {res['limits']}; bidir at 2 GiB H2D/D2H "
          f"{res['bidir_2GiB']} GB/s; THP {res['thp']}; AnonHugePages {res['AnonHugePages_kB_during']} kB")
    for r in res["rows"]:
        print(f"{r['schedule']:50} median {r['median_ms']:8.2f} ms (min {r['min_ms']:.2f} max {r['max_ms']:.2f}) "
              f"x bound {r['ratio_to_bound']:.3f}  x duplex {r['ratio_to_duplex_bound']:.3f}  "
              f"speed-up vs serial {r['speedup_vs_serial']:.2f}x")
    print(f"total {time.time() - t0:.0f} s")
    return 0 if len(good) == len(schedules) else 1


if __name__ == "__main__":
    raise SystemExit(main())
