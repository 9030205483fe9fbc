"""The worker contract: a WorkerSpec is built by its constructor and read back field by field;
a key it does not know is an error where it is read."""
from __future__ import annotations

import pytest

from numabench.cases import Case
from numabench.errors import UsageError
from numabench.families import family
from numabench.families.base import WorkerSpec
from numabench.machine.capabilities import probe
from numabench.machine.topology import discover
from numabench.numa.policy import Policy
from numabench.workers.run import run_case


def test_a_spec_key_that_is_no_field_is_an_error_where_it_is_read():
    """A misspelt key used to land silently in ``extra`` (a setting that never took effect)."""
    spec = WorkerSpec(numel=4, gpu=1, extra={"master_port": 1234})
    assert WorkerSpec.from_dict(spec.to_dict()) == spec
    with pytest.raises(ValueError, match="WorkerSpec has no field.*'chunk_elems'.*under 'extra'"):
        WorkerSpec.from_dict({**spec.to_dict(), "chunk_elems": 1 << 20})


def test_spec_extra_cannot_override_a_typed_field():
    """A rank's GPU comes from the case and its ranks (rank_gpus for a tool that picks one), not
    from the family's extras."""
    topo = discover("/")
    caps = probe(first_node=(topo.memory_node_ids or (0,))[0])
    case = Case("touch", 1, 1024, Policy.parse("default"), "fp32")
    with pytest.raises(ValueError, match="spec_extra key.*gpu.*name WorkerSpec fields"):
        run_case(case, family("touch"), topo, caps, rounds=1, warmup=0, spec_extra={"gpu": 0})


def test_every_family_worker_steps_with_the_base_signature():
    """workers.main calls ``step(variant)`` on every family alike: no family may drop the argument."""
    import inspect

    from numabench.families import FAMILIES
    from numabench.families.base import Worker
    from numabench.workers.main import worker_class

    base = list(inspect.signature(Worker.step).parameters)
    for key in FAMILIES:
        assert list(inspect.signature(worker_class(key).step).parameters) == base, key


def test_a_spec_carries_its_size_as_numel_or_batch_never_both():
    """A batch family's size is samples (``batch``), the others' elements (``numel``): exactly one."""
    batch = WorkerSpec(batch=32)
    assert batch.numel is None and WorkerSpec.from_dict(batch.to_dict()) == batch
    with pytest.raises(UsageError, match="numel=4 and batch=32: set exactly one"):
        WorkerSpec(numel=4, batch=32)
    with pytest.raises(UsageError, match="numel=None and batch=None: set exactly one"):
        WorkerSpec()
    with pytest.raises(UsageError, match="batch 0 per rank: must be >= 1"):
        WorkerSpec(batch=0)


@pytest.mark.parametrize("key", ["dataloader", "train_step", "touch", "adam_offload"])
def test_the_parent_sends_each_family_its_size_where_its_worker_reads_it(key):
    from numabench.workers.main import check_size

    fam = family(key)
    spec = WorkerSpec(**fam.spec_size(8))
    assert (spec.batch, spec.numel) == ((8, None) if fam.size_is_batch else (None, 8))
    check_size(spec, fam)
    wrong = WorkerSpec(numel=8) if fam.size_is_batch else WorkerSpec(batch=8)
    with pytest.raises(ValueError, match=f"family {key}'s size is"):
        check_size(wrong, fam)
