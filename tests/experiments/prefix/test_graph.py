"""Prefix graphs: the NumPy reference, the classic builders, netlists that add, and the JAX
computations against the reference."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.prefix import graph as G
from experiments.prefix import jax_graph as J
from experiments.prefix.builders import brent_kung, classic_adders, kogge_stone, ripple, sklansky
from experiments.prefix.netlist import (
    Gate,
    Netlist,
    check_adds,
    netlist,
    simulate,
    simulate_blif,
    to_blif,
    to_verilog,
)
from experiments.prefix.synthesis import SynthesisError, run_yosys


def random_graphs(n: int, count: int, seed: int = 0, legal: bool = True) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    graphs = []
    for _ in range(count):
        raw = G.empty_graph(n) | (G.editable(n) & (rng.random((n, n)) < rng.random() * 0.4))
        graphs.append(G.legalize(raw) if legal else raw)
    return graphs


@pytest.mark.parametrize("n", [4, 8, 16, 32, 64])
def test_classic_adders_have_their_textbook_sizes_and_depths(n):
    k = int(math.log2(n))
    expected = {  # (node count, logic levels)
        "ripple": (n - 1, n - 1),
        "sklansky": (n // 2 * k, k),
        "kogge-stone": (n * k - n + 1, k),
        "brent-kung": (2 * n - 2 - k, 2 * k - 2),
    }
    for name, nodes in classic_adders(n).items():
        G.check_graph(nodes)
        assert G.is_legal(nodes), name
        assert (G.area(nodes), G.delay(nodes)) == expected[name], name


def test_builders_work_for_any_width():
    for n in (3, 5, 12, 33):
        for name, nodes in classic_adders(n).items():
            assert G.is_legal(nodes), (n, name)
            check_adds(nodes, samples=200)
        assert G.delay(sklansky(n)) == math.ceil(math.log2(n))
        assert G.delay(kogge_stone(n)) == math.ceil(math.log2(n))


def test_parents_and_legalisation_by_hand():
    nodes = ripple(4)
    nodes[3, 1] = True  # upper parent (3, 3), lower parent (2, 1): missing
    assert G.parents(nodes, 3, 1) == ((3, 3), (2, 1))
    assert G.parents(nodes, 3, 0) == ((3, 1), (0, 0))
    assert not G.is_legal(nodes)
    legal = G.legalize(nodes)
    expected = ripple(4)
    expected[3, 1] = expected[2, 1] = True  # (2, 1) has parents (2, 2) and (1, 1): present
    np.testing.assert_array_equal(legal, expected)
    np.testing.assert_array_equal(G.apply_action(ripple(4), 0 * 16 + 3 * 4 + 1), expected)


def test_one_legalisation_pass_suffices():
    for n in (5, 9, 16):
        for raw in random_graphs(n, 30, seed=n, legal=False):
            legal = G.legalize(raw)
            assert G.is_legal(legal)
            assert (legal >= raw).all()  # only inserts
            np.testing.assert_array_equal(G.legalize(legal), legal)


def test_action_mask_by_hand():
    n = 4
    nodes = ripple(n)
    nodes[3, 1] = nodes[2, 1] = True  # (3, 1) has lower parent (2, 1)
    mask = G.action_mask(nodes)
    add, delete = mask[: n * n].reshape(n, n), mask[n * n:].reshape(n, n)
    np.testing.assert_array_equal(np.argwhere(add), [[3, 2]])  # the one absent editable cell
    np.testing.assert_array_equal(np.argwhere(delete), [[3, 1]])  # (2, 1) is a lower parent
    with pytest.raises(ValueError, match="illegal action"):
        G.apply_action(nodes, n * n + 2 * n + 1)  # delete (2, 1)
    with pytest.raises(ValueError, match="illegal action"):
        G.apply_action(nodes, 3 * n + 0)  # add (3, 0): column 0 is not editable
    np.testing.assert_array_equal(G.apply_action(nodes, n * n + 3 * n + 1), G.apply_action(ripple(n), 2 * n + 1))


def test_sklansky_nodes_that_feed_others_cannot_be_deleted():
    nodes = sklansky(8)
    delete = G.action_mask(nodes)[64:].reshape(8, 8)
    assert G.parents(nodes, 7, 4) == ((7, 6), (5, 4))
    assert not delete[5, 4]  # the lower parent of (7, 4)
    assert delete[7, 6]  # only an upper parent: deletable, and nothing needs inserting
    after = G.apply_action(nodes, 64 + 7 * 8 + 6)
    assert G.is_legal(after) and G.area(after) == G.area(nodes) - 1


def test_levels_fanout_and_fanout_aware_arrival_by_hand():
    nodes = ripple(3)
    np.testing.assert_array_equal(G.levels(nodes)[:, 0], [0, 1, 2])
    fan = G.fanout(nodes)
    assert fan[0, 0] == 1 and fan[1, 1] == 1 and fan[1, 0] == 1 and fan[2, 2] == 1 and fan[2, 0] == 0
    times = G.arrival_times(nodes, 0.5)
    assert times[0, 0] == 0.5 and times[1, 0] == 2.0 and times[2, 0] == 3.0
    assert G.delay(nodes, 0.5) == 3.0
    # Sklansky's high fanout costs it delay against Kogge-Stone once loads count.
    assert G.delay(sklansky(32), 0.5) > G.delay(kogge_stone(32), 0.5)


@pytest.mark.parametrize("n", [3, 8, 17, 32, 63])
def test_netlists_of_random_and_classic_graphs_add(n):
    for nodes in list(classic_adders(n).values()) + random_graphs(n, 3, seed=n):
        check_adds(nodes, samples=300, seed=n)


def test_check_adds_catches_a_broken_netlist():
    net = netlist(brent_kung(8))
    a, b = np.meshgrid(np.arange(256, dtype=np.uint64), np.arange(256, dtype=np.uint64))
    a, b = a.ravel(), b.ravel()
    np.testing.assert_array_equal(simulate(net, a, b), a + b)  # every 8-bit pair
    broken = [Gate(g.out, "and" if g.op == "or" else g.op, g.a, g.b) if g.out == "g_7_0" else g for g in net.gates]
    assert (simulate(Netlist(8, broken, net.outputs), a, b) != a + b).any()
    with pytest.raises(ValueError, match="not legal"):
        netlist(np.array(ripple(4)) | (np.arange(4)[:, None] == 3) & (np.arange(4)[None, :] == 1))


def test_blif_file_simulates_to_the_sum():
    n = 12
    nodes = random_graphs(n, 1, seed=3)[0]
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 1 << n, 500), rng.integers(0, 1 << n, 500)
    inputs = {f"a[{i}]": (a >> i) & 1 for i in range(n)} | {f"b[{i}]": (b >> i) & 1 for i in range(n)}
    out = simulate_blif(to_blif(nodes), inputs)
    total = sum(out[f"s[{i}]"].astype(np.int64) << i for i in range(n + 1))
    np.testing.assert_array_equal(total, a + b)


def test_verilog_is_formally_an_adder():
    """Yosys proves the written module equal to `a + b` for every input (SAT on a miter)."""
    n = 32
    reference = (f"module reference(input [{n - 1}:0] a, input [{n - 1}:0] b, output [{n}:0] s);\n"
                 "  assign s = a + b;\nendmodule\n")
    proof = [["read_verilog", "{dir}/design.v", "{dir}/reference.v"], ["proc"],
             ["miter", "-equiv", "-flatten", "-make_assert", "prefix_adder", "reference", "miter"],
             ["hierarchy", "-top", "miter"], ["sat", "-verify", "-prove-asserts", "miter"]]

    def prove(text):
        return run_yosys(proof, {"design.v": text, "reference.v": reference})

    for nodes in [brent_kung(n), sklansky(n), random_graphs(n, 1, seed=5)[0]]:
        assert "SUCCESS!" in prove(to_verilog(nodes))
    wrong = to_verilog(kogge_stone(n)).replace("assign s[7] = s_7;", "assign s[7] = s_6;")
    with pytest.raises(SynthesisError, match="proof did fail"):
        prove(wrong)


def _batched(fn, graphs):
    return np.asarray(jax.jit(jax.vmap(fn))(jnp.asarray(np.stack(graphs))))


@pytest.mark.parametrize("n", [12])
def test_jax_computations_match_the_numpy_reference(n):
    raws = random_graphs(n, 24, seed=n, legal=False)
    legal = [G.legalize(raw) for raw in raws] + list(classic_adders(n).values())
    np.testing.assert_array_equal(_batched(J.legalize, raws), np.stack([G.legalize(r) for r in raws]))
    for weight in (0.0, 0.3):
        analysis = jax.jit(jax.vmap(J.analyse, in_axes=(0, None)), static_argnums=1)(jnp.asarray(np.stack(legal)), weight)
        np.testing.assert_allclose(analysis.times, np.stack([G.arrival_times(g, weight) for g in legal]), rtol=1e-6)
        np.testing.assert_allclose(analysis.delay, [G.delay(g, weight) for g in legal], rtol=1e-6)
        feats = jax.vmap(J.features)(jnp.asarray(np.stack(legal)), analysis)
        np.testing.assert_allclose(feats, np.stack([G.features(g, weight) for g in legal]), rtol=1e-6)
    np.testing.assert_array_equal(analysis.fanout, np.stack([G.fanout(g) for g in legal]))
    np.testing.assert_array_equal(analysis.action_mask, np.stack([G.action_mask(g) for g in legal]))
    np.testing.assert_array_equal(analysis.area, [G.area(g) for g in legal])
    # apply_action: legal actions as the reference; illegal ones leave the graph alone.
    rng = np.random.default_rng(n)
    actions = [int(rng.choice(np.flatnonzero(G.action_mask(g)))) for g in legal]
    actions[0] = 0  # add (0, 0): never legal
    stepped, ok = jax.jit(jax.vmap(J.apply_action))(jnp.asarray(np.stack(legal)), jnp.asarray(actions))
    expected = [g if k == 0 else G.apply_action(g, a) for k, (g, a) in enumerate(zip(legal, actions))]
    np.testing.assert_array_equal(stepped, np.stack(expected))
    assert not ok[0] and ok[1:].all()
