"""numabench.toolkit.rehome: a library's host tensors moved into placed buffers of ours, every view
of them following, the bytes kept; tensors that later live elsewhere are named."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from numabench.machine.topology import discover  # noqa: E402
from numabench.numa.place import Place  # noqa: E402
from numabench.numa.placement import read_numa_maps  # noqa: E402
from numabench.toolkit.rehome import rehome, tensors_under  # noqa: E402

NODE = (discover("/").memory_node_ids or (0,))[0]
TOUCHES = {"master": 2, "grads": 2, "moments": 2}


def test_views_follow_the_copy_and_the_bytes_are_kept():
    master = torch.arange(3000, dtype=torch.float32)
    flat_grad = torch.arange(5000, dtype=torch.float32) * -1
    grad_view = flat_grad[1000:3000]  # a view the library keeps elsewhere (e.g. per parameter)
    library = {"per_param": {7: grad_view}, "flat": flat_grad}
    m, v = torch.ones(3000), torch.full((3000,), 2.0)
    kinds = {"master": [master], "grads": [flat_grad], "moments": [m, v]}
    out = rehome(kinds, Place.parse(f"master:bind:{NODE}+moments:interleave:{NODE}"), TOUCHES,
                 views=tensors_under(library))
    try:
        addrs = out.addresses()
        assert set(addrs) == {"master.0", "grads.1", "moments.2", "moments.3"}
        assert master.data_ptr() == addrs["master.0"] and flat_grad.data_ptr() == addrs["grads.1"]
        assert grad_view.data_ptr() == addrs["grads.1"] + 1000 * 4  # the view moved with its storage
        assert torch.equal(master, torch.arange(3000, dtype=torch.float32))
        assert torch.equal(grad_view, torch.arange(1000, 3000, dtype=torch.float32) * -1)
        grad_view.fill_(5.0)
        assert float(flat_grad[1500]) == 5.0  # one storage still
        # the copies are mappings of their own, bound as their kinds say (grads: the process policy)
        policies = {e.address: e.policy for e in read_numa_maps()}
        assert policies[addrs["master.0"]] == f"bind:{NODE}"
        assert policies[addrs["moments.2"]] == f"interleave:{NODE}"
        [g] = [r for r in out.state.report(addrs) if r.kind == "grads"]
        assert g.policy is None and g.report.untouched_bytes == 0
        assert out.stray(kinds) == []
        assert out.stray({"moments": [torch.zeros(10)]})[0].startswith("moments: 40 bytes at 0x")
    finally:
        out.release()


def test_one_storage_of_two_kinds_is_refused():
    flat = torch.zeros(100)
    with pytest.raises(ValueError, match="kinds master and grads: they cannot be placed apart"):
        rehome({"master": [flat[:50]], "grads": [flat[50:]]}, Place.parse(f"master:bind:{NODE}"), TOUCHES)
