"""numabench.numa.policy: grammar, names, errors, and checks against recorded machines."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest

from numabench.errors import PolicyError, UsageError
from numabench.machine.topology import Topology, discover
from numabench.numa import mempolicy
from numabench.numa.placement import Expectation
from numabench.numa.policy import KINDS, Policy, parse_policies

MACHINES = Path(__file__).resolve().parent / "data" / "machines"


@lru_cache(maxsize=None)
def topo(name: str) -> Topology:
    return discover(MACHINES / name)


# canonical text -> (kind, nodes, weights, all_nodes, mode)
CANONICAL = {
    "default": ("default", (), (), False, mempolicy.MPOL_DEFAULT),
    "local": ("local", (), (), False, mempolicy.MPOL_BIND),
    "bind:0": ("bind", (0,), (), False, mempolicy.MPOL_BIND),
    "bind:0,1": ("bind", (0, 1), (), False, mempolicy.MPOL_BIND),
    "preferred:1": ("preferred", (1,), (), False, mempolicy.MPOL_PREFERRED),
    "preferred-many:0,3": ("preferred-many", (0, 3), (), False, mempolicy.MPOL_PREFERRED_MANY),
    "interleave:0,1": ("interleave", (0, 1), (), False, mempolicy.MPOL_INTERLEAVE),
    "interleave:all": ("interleave", (), (), True, mempolicy.MPOL_INTERLEAVE),
    "weighted:0=1,3=3": ("weighted", (0, 3), (1, 3), False, mempolicy.MPOL_WEIGHTED_INTERLEAVE),
}


def test_every_kind_has_a_canonical_case():
    assert {v[0] for v in CANONICAL.values()} == set(KINDS)


@pytest.mark.parametrize("text", list(CANONICAL))
def test_parse_and_str_round_trip(text):
    kind, nodes, weights, all_nodes, mode = CANONICAL[text]
    p = Policy.parse(text)
    assert (p.kind, p.nodes, p.weights, p.all_nodes) == (kind, nodes, weights, all_nodes)
    assert str(p) == text
    assert p.id == text
    assert p.mode == mode
    assert Policy.parse(str(p)) == p


@pytest.mark.parametrize("text, canonical", [
    pytest.param("  BIND:1 ", "bind:1", id="case-and-spaces"),
    pytest.param("bind:0-2", "bind:0,1,2", id="range"),
    pytest.param("bind:1,0", "bind:0,1", id="sorted"),
    pytest.param("interleave: 0 , 1", "interleave:0,1", id="spaces-in-list"),
    pytest.param("interleave: all", "interleave:all", id="all-with-space"),
    pytest.param("weighted:3=3,0=1", "weighted:0=1,3=3", id="weighted-sorted-by-node"),
    pytest.param("weighted: 0 = 1 , 1=255", "weighted:0=1,1=255", id="weighted-spaces-max-weight"),
    pytest.param("Default", "default", id="default-upper"),
])
def test_parse_canonicalizes(text, canonical):
    p = Policy.parse(text)
    assert p.id == canonical
    assert Policy.parse(p.id) == p


def test_weight_map():
    assert Policy.parse("weighted:3=3,0=1").weight_map == {0: 1, 3: 3}


# bad text -> a substring the message must contain (the bad part)
BAD = [
    pytest.param("bogus:0", "'bogus'", id="unknown-kind"),
    pytest.param("interleaved:0,1", "'interleaved'", id="misspelt-kind"),
    pytest.param("", "''", id="empty"),
    pytest.param("bind:x", "'x'", id="node-not-a-number"),
    pytest.param("interleave:0,one", "'one'", id="second-node-not-a-number"),
    pytest.param("bind:-1", "'-1'", id="negative-node"),
    pytest.param("bind:3-1", "'3-1'", id="backwards-range"),
    pytest.param("bind:", "needs nodes", id="bind-without-nodes"),
    pytest.param("bind", "needs nodes", id="bind-without-colon"),
    pytest.param("weighted:0=0", "weight 0 ", id="weight-0"),
    pytest.param("weighted:0=1,1=256", "weight 256 ", id="weight-256"),
    pytest.param("weighted:0=1,1", "'1'", id="missing-equals"),
    pytest.param("weighted:0", "lacks '=W'", id="missing-equals-only-entry"),
    pytest.param("weighted:0=x", "'0=x'", id="weight-not-a-number"),
    pytest.param("weighted:a=1", "'a=1'", id="weighted-node-not-a-number"),
    pytest.param("weighted:-1=2", "node -1", id="weighted-negative-node"),
    pytest.param("weighted:0=1,0=2", "twice", id="duplicate-node"),
    pytest.param("preferred:0,1", "'0,1'", id="preferred-two-nodes"),
    pytest.param("default:0", "'default:0'", id="default-with-node"),
    pytest.param("local:1", "'local:1'", id="local-with-node"),
]


@pytest.mark.parametrize("text, names", BAD)
def test_bad_policy_one_line_naming_the_bad_part(text, names):
    with pytest.raises(PolicyError) as ei:
        Policy.parse(text)
    msg = str(ei.value)
    assert isinstance(ei.value, UsageError) and isinstance(ei.value, ValueError)
    assert "\n" not in msg, msg
    assert names in msg, msg


def test_unknown_kind_lists_allowed():
    with pytest.raises(PolicyError, match="allowed default, local, bind"):
        Policy.parse("bogus:0")


def test_preferred_two_nodes_suggests_preferred_many():
    with pytest.raises(PolicyError, match="preferred-many"):
        Policy.parse("preferred:0,1")


def test_duplicate_weighted_node_is_named():
    with pytest.raises(PolicyError, match=r"node 0\b"):
        Policy.parse("weighted:0=1,1=2,0=3")


@pytest.mark.parametrize("tree, text, missing", [
    pytest.param("vm-1node", "bind:1", "1", id="vm-bind1"),
    pytest.param("vm-1node", "interleave:0,1", "1", id="vm-interleave01"),
    pytest.param("vm-1node", "weighted:0=1,1=3", "1", id="vm-weighted"),
    pytest.param("h200x2-vm", "preferred:1", "1", id="h200-preferred1"),
    pytest.param("dgx-2socket-8gpu", "bind:3", "3", id="dgx-bind3"),
    pytest.param("cxl-3node", "weighted:0=1,2=3", "2", id="cxl-no-node2"),
    pytest.param("cxl-3node", "preferred-many:2,4", "2,4", id="cxl-two-missing"),
])
def test_requirement_error_names_missing_node(tree, text, missing):
    err = Policy.parse(text).requirement_error(topo(tree))
    assert err is not None
    assert f"needs NUMA node(s) {missing} with memory" in err
    assert text in err
    assert "\n" not in err
    with pytest.raises(PolicyError, match="needs NUMA node"):
        Policy.parse(text).validate(topo(tree))


def test_requirement_error_lists_what_the_machine_has():
    err = Policy.parse("bind:1").requirement_error(topo("vm-1node"))
    assert err.endswith("this machine has 1 such node(s): 0")


@pytest.mark.parametrize("tree, text", [
    ("cxl-3node", "weighted:0=1,3=3"),
    ("cxl-3node", "bind:3"),
    ("cxl-3node", "preferred-many:0,3"),
    ("dgx-2socket-8gpu", "interleave:0,1"),
    ("vm-1node", "bind:0"),
    ("vm-1node", "interleave:all"),
    ("vm-1node", "local"),
    ("vm-1node", "default"),
    ("old-kernel-2node", "weighted:0=1,1=1"),  # the kernel check is elsewhere (capabilities)
])
def test_requirement_ok(tree, text):
    assert Policy.parse(text).requirement_error(topo(tree)) is None


def test_resolve_local_known_node():
    assert Policy.parse("local").resolve(topo("dgx-2socket-8gpu"), own_node=1) == Policy("bind", (1,))


def test_resolve_local_unknown_node():
    with pytest.raises(PolicyError, match="unknown") as ei:
        Policy.parse("local").resolve(topo("old-kernel-2node"), own_node=None)
    assert "numa_node is -1" in str(ei.value)


@pytest.mark.parametrize("tree, nodes", [("cxl-3node", (0, 1, 3)), ("vm-1node", (0,)), ("dgx-2socket-8gpu", (0, 1))])
def test_resolve_interleave_all(tree, nodes):
    r = Policy.parse("interleave:all").resolve(topo(tree), own_node=None)
    assert r == Policy("interleave", nodes)
    assert not r.all_nodes


def test_resolve_explicit_is_unchanged_and_validated():
    p = Policy.parse("weighted:0=1,3=3")
    assert p.resolve(topo("cxl-3node"), own_node=0) is p
    with pytest.raises(PolicyError, match="needs NUMA node"):
        Policy.parse("bind:1").resolve(topo("vm-1node"), own_node=0)


@pytest.mark.parametrize("text, cpu_node, expected", [
    pytest.param("interleave:0,1", None, Expectation(shares={0: 0.5, 1: 0.5}), id="interleave-2"),
    pytest.param("weighted:0=1,3=3", None, Expectation(shares={0: 0.25, 3: 0.75}), id="weighted-1-3"),
    pytest.param("weighted:0=1,1=1", None, Expectation(shares={0: 0.5, 1: 0.5}), id="weighted-1-1"),
    pytest.param("bind:0,1", None, Expectation(within=(0, 1)), id="bind-within-set"),
    pytest.param("bind:1", 0, Expectation(within=(1,)), id="bind-ignores-cpu-node"),
    pytest.param("preferred:1", None, Expectation(within=(1,)), id="preferred"),
    pytest.param("preferred-many:0,3", None, Expectation(within=(0, 3)), id="preferred-many"),
    pytest.param("default", 1, Expectation(within=(1,)), id="default-bound-cpu"),
    pytest.param("default", None, None, id="default-unbound-promises-nothing"),
])
def test_expectation(text, cpu_node, expected):
    assert Policy.parse(text).expectation(cpu_node) == expected


def test_expectation_interleave_three_nodes():
    shares = Policy.parse("interleave:0,1,3").expectation().shares
    assert shares == pytest.approx({0: 1 / 3, 1: 1 / 3, 3: 1 / 3})
    assert sum(shares.values()) == pytest.approx(1.0)


@pytest.mark.parametrize("text", ["local", "interleave:all"])
def test_expectation_needs_resolved_policy(text):
    with pytest.raises(PolicyError, match="must be resolved"):
        Policy.parse(text).expectation()


@pytest.mark.parametrize("text, ids", [
    pytest.param("default;bind:0;interleave:0,1", ["default", "bind:0", "interleave:0,1"], id="three"),
    pytest.param(" weighted:0=1,1=3 ; interleave:all ", ["weighted:0=1,1=3", "interleave:all"], id="spaces"),
    pytest.param("local", ["local"], id="one"),
])
def test_parse_policies(text, ids):
    assert [p.id for p in parse_policies(text)] == ids


@pytest.mark.parametrize("text", ["", " ; ;", ";"])
def test_parse_policies_empty(text):
    with pytest.raises(PolicyError, match="empty policy list"):
        parse_policies(text)


@pytest.mark.parametrize("text", ["bind:0;;", "bind:0;", ";bind:0", "default; ;bind:0"])
def test_an_empty_entry_among_policies_is_an_error(text):
    """As in every other list option (--param-sizes=1M,,2M): a doubled or trailing separator is a typo."""
    with pytest.raises(PolicyError, match=f"empty entry in policies {text!r}"):
        parse_policies(text)


def test_parse_policies_bad_item():
    with pytest.raises(PolicyError, match="'bogus'"):
        parse_policies("default;bogus:1")
