"""broadcast: one host tensor, placed by the NUMA policy, copied to every GPU.

Seed 002 (task 2 of a multi-GPU lab on an 8x H100 two-socket machine, NV18
between all GPUs, GPUs 0-3 on node 0 and 4-7 on node 1) times three versions
of a broadcast through a host tensor ``a``: 1.36 s (broadcast1), 0.37 s
(broadcast2: ``a`` pinned, every copy ``non_blocking`` on its own stream),
0.075 s (broadcast3: the same, pipelined in contiguous blocks: block k goes to
the GPUs while block k+1 is being made ready in ``a``). The seed does not show
its code or its size; here the source is a host tensor under the policy (the
NUMA question: where the broadcast reads from) and the ``method`` axis is:

- ``pageable`` (broadcast1): the pageable source copied to each GPU in turn;
- ``pinned`` (broadcast2): a pinned source (registered, placed like the
  pageable one), one ``non_blocking`` copy per GPU, each on its own stream,
  all in flight at once;
- ``pipelined`` (broadcast3): the pageable source in contiguous chunks
  through two pinned staging buffers (double-buffered): chunk k is copied to
  all GPUs (a stream per GPU) while the CPU stages chunk k+1;
- ``relay`` (the NVLink variant of broadcast3): the pinned source in chunks to
  GPU 0 only, GPU 0 forwarding each chunk to its peers (peer copies, over
  NVLink where there is one) while the next chunk crosses PCIe: host memory is
  read once instead of once per GPU.

One worker process drives all GPUs (rank 0 only, bound to the first CPU node):
the family's ranks are ``cpu-node`` ranks, so the default process count is 1,
and nprocess > 1 is skipped with the reason. Needs >= 2 GPUs. Each method's
result on every GPU is checked against the source (exact int64 checksum and a
bitwise compare) before anything is timed. The time is wall clock from issue
to the last GPU's completion (all devices synchronized before and after): one
broadcast spans several devices, which CUDA events of one device cannot time.

Default matrix on an 8-GPU two-socket machine: 2 sizes (64 MiB and 1 GiB
fp32) x 8 runnable policies = 16 worker runs of 10 rounds x 4 methods (about
1 s per round at 1 GiB, pageable to 8 GPUs dominating): about 3 minutes.
"""
from __future__ import annotations

from numabench.cases import Case, CaseResult
from numabench.families.base import Family
from numabench.families.broadcast.reply import BroadcastReply

DEFAULT_ROUNDS = 10
DEFAULT_WARMUP = 2
METHODS = ("pageable", "pinned", "pipelined", "relay")


def _one_process(case: Case) -> str | None:
    if case.nprocess != 1:
        return (f"broadcast runs one process that drives every GPU; nprocess={case.nprocess} "
                "means nothing here (use nprocess 1)")
    return None


def metrics(result: CaseResult, phase: str) -> dict:
    info = result.setup_info[0]
    nbytes = info.bytes
    ngpu = info.ngpus
    med = result.median(phase)
    return {
        "bytes": nbytes, "ngpus": ngpu,
        "GBps": round(nbytes / med / 1e9, 3),  # source bytes broadcast per second
        "delivered_GBps": round(nbytes * ngpu / med / 1e9, 3),  # bytes landed on all GPUs per second
        "method": result.case.param("method", "pageable"),
        "chunk_bytes": info.chunk_bytes, "peer_access": info.peer_access,
        "checksum": info.checksum, "devices": info.devices,
    }


FAMILY = Family(
    key="broadcast",
    description=("one policy-placed host tensor to every GPU: pageable in turn, pinned with a stream per "
                 "GPU, pipelined through double-buffered pinned staging, relayed by GPU 0 over peer links"),
    needs="2+ GPUs",
    phases=("broadcast",),
    setup_reply=BroadcastReply,
    needs_gpu=True,
    min_gpus_per_case=lambda case: 2,
    default_sizes=(16 * 2**20, 256 * 2**20),
    default_dtypes=("fp32",),
    extra_axes={"method": METHODS},
    worker_axes=("method",),
    knobs=("chunk_nbytes",),  # pipelined and relay chunk (auto: worker.chunk_bytes)
    # the pageable source, its pinned twin, two staging chunks (small)
    host_bytes_per_element=lambda case: 2 * case.itemsize,
    device_bytes_per_element=lambda case: case.itemsize,
    rank_kind="cpu-node",  # one driving process, not one per GPU
    case_skip_reason=_one_process,
    metrics=metrics,
    default_rounds=DEFAULT_ROUNDS,
    default_warmup=DEFAULT_WARMUP,
)
