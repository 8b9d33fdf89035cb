"""Pareto fronts, hypervolume, the search baselines under a budget of unique syntheses, and
the prefix-baseline / prefix-front commands."""

import json
import os

import numpy as np
import pytest

from experiments.cli import main
from experiments.prefix import graph as G
from experiments.prefix import synthesis
from experiments.prefix.builders import classic_adders, sklansky
from experiments.prefix.cost_pools import make_pool
from experiments.prefix.front import (
    Design,
    dominates,
    front_designs,
    hypervolume,
    nodes_from_rows,
    pareto_front,
    read_designs,
    write_designs,
)
from experiments.prefix.netlist import check_adds
from experiments.prefix.search import METHODS, anneal, pareto_local_search, random_search, search


def test_pareto_front_and_hypervolume_by_hand():
    points = np.array([[3, 1], [1, 3], [2, 2], [2, 3], [3, 3], [1, 3], [4, 0.5]])
    np.testing.assert_array_equal(pareto_front(points), [1, 2, 0, 6])
    assert dominates((2, 2), (2, 3)) and not dominates((2, 2), (2, 2)) and not dominates((1, 3), (2, 2))
    # Staircase under the reference (4, 4): [1,2]x[3,4] + [2,3]x[2,4] + [3,4]x[1,4] = 1 + 2 + 3.
    assert hypervolume(points, (4, 4)) == pytest.approx(6.0)
    assert hypervolume(points, (5, 4)) == pytest.approx(6.0 + 3.5)  # (4, 0.5) adds [4,5]x[0.5,4]
    assert hypervolume(np.array([[5, 5]]), (4, 4)) == 0.0
    rng = np.random.default_rng(0)  # against a Monte Carlo estimate
    cloud = rng.random((30, 2))
    samples = rng.random((200_000, 2))
    covered = (samples[:, None, :] >= cloud[None]).all(-1).any(-1).mean()
    assert hypervolume(cloud, (1, 1)) == pytest.approx(covered, abs=0.01)


def test_designs_round_trip_through_the_file(tmp_path):
    designs = [Design(g, float(G.area(g)), G.delay(g)) for g in classic_adders(12).values()]
    path = str(tmp_path / "designs.jsonl")
    write_designs(path, designs, "analytic-0")
    back, model = read_designs(str(tmp_path))
    assert model == "analytic-0" and len(back) == 4
    for a, b in zip(designs, back):
        np.testing.assert_array_equal(a.nodes, b.nodes)
        assert (a.area, a.delay) == (b.area, b.delay)
    with pytest.raises(ValueError, match="not a legal prefix graph"):
        nodes_from_rows(["1", "11", "101", "1101"])  # (3, 2)... (3, 1)'s lower parent (2, 1) missing
    with pytest.raises(ValueError, match="does not exist"):
        read_designs(str(tmp_path / "nowhere"))


@pytest.mark.parametrize("method", METHODS)
def test_search_spends_exactly_its_budget_of_distinct_designs(method):
    pool, _ = make_pool("analytic")
    with pool:
        result = search(method, pool, 16, budget=40, seed=1)
    assert len(result.designs) == 40
    assert len({d.nodes.tobytes() for d in result.designs}) == 40
    for d in result.designs:
        assert G.is_legal(d.nodes) and d.area == G.area(d.nodes) and d.delay == G.delay(d.nodes)
    assert result.reference == (G.area(sklansky(16)), G.delay(sklansky(16)))


def test_annealing_beats_random_search_and_sklansky_on_the_analytic_cost():
    pool, _ = make_pool("analytic")
    with pool:
        annealed = anneal(pool, 16, budget=150, seed=0)
        sampled = random_search(pool, 16, budget=150, seed=0)
    reference = (60.0, 16.0)

    def volume(result):
        return hypervolume(np.array([[d.area, d.delay] for d in result.designs]), reference)

    assert volume(annealed) > volume(sampled)
    skl = (G.area(sklansky(16)), G.delay(sklansky(16)))
    assert any(dominates((d.area, d.delay), skl) for d in annealed.designs)


def test_pareto_local_search_beats_random_search_on_the_analytic_cost():
    """Edits of the front found so far cover the trade-off better than independent random
    graphs under the same budget (measured at 3000 syntheses with Yosys: 0.194-0.197
    against 0.185-0.187); and its front keeps improving on the classics it starts from."""
    pool, _ = make_pool("analytic")
    classics = {name: (G.area(g), G.delay(g)) for name, g in classic_adders(16).items()}
    reference = (max(a for a, _ in classics.values()), max(d for _, d in classics.values()))

    def volume(result):
        return hypervolume(np.array([[d.area, d.delay] for d in result.designs]), reference)

    with pool:
        for seed in (0, 1):
            local = pareto_local_search(pool, 16, budget=300, seed=seed)
            sampled = random_search(pool, 16, budget=300, seed=seed)
            assert volume(local) > volume(sampled), seed
            assert volume(local) > hypervolume(np.array(list(classics.values())), reference)


def test_pareto_local_search_edits_the_front_it_has_found():
    """With one edit per proposal and one proposal per batch, every design after the
    classics is one legal action away from a design on the front of those evaluated before
    it (dominated designs are never edited)."""
    pool, _ = make_pool("analytic", fanout_weight=0.5)
    with pool:
        designs = pareto_local_search(pool, 8, budget=40, seed=0, batch=1, max_moves=1).designs
    assert len(designs) == 40
    for k in range(len(classic_adders(8)), len(designs)):
        children = {G.apply_action(parent.nodes, a).tobytes() for parent in front_designs(designs[:k])
                    for a in np.flatnonzero(G.action_mask(parent.nodes))}
        assert designs[k].nodes.tobytes() in children, k


@pytest.mark.parametrize("method", ["anneal", "local"])
def test_prefix_baseline_command_writes_the_front_as_verilog_that_adds(tmp_path, capsys, method):
    out = str(tmp_path / method)
    main(["prefix-baseline", "--bits", "8", "--method", method, "--budget", "30", "--cost", "analytic",
          "--out", out, "--json"])
    summary = json.loads(capsys.readouterr().out)
    assert summary["designs"] == 30 and summary["budget"] == 30 and os.path.exists(summary["plot"])
    assert 0 < summary["hypervolume"] < 1 and len(summary["verilog"]) == len(summary["front"])
    designs, _ = read_designs(out)
    front = sorted((p["area"], p["delay"]) for p in summary["front"])
    for d in designs:  # nothing evaluated dominates the front
        assert not any(dominates((d.area, d.delay), point) for point in front)
    for path in summary["verilog"]:
        with open(path) as f:
            text = f.read()
        module = os.path.basename(path).split("_area")[0]
        assert f"module {module}(input [7:0] a, input [7:0] b, output [8:0] s);" in text
    # The .v files hold the front's graphs: their netlists add.
    for d in designs:
        if (d.area, d.delay) in front:
            check_adds(d.nodes, samples=100)
    # prefix-front on the same directory gives the same front (its plot where --out says,
    # the directory made if missing).
    plot = str(tmp_path / "plots" / "front.png")
    main(["prefix-front", out, "--out", plot, "--json"])
    again = json.loads(capsys.readouterr().out)
    assert again["front"] == summary["front"] and again["hypervolume"] == summary["hypervolume"]
    assert again["plot"] == plot and os.path.getsize(plot) > 0


def test_the_command_offers_every_search_method():
    from experiments.cli_parser import build_parser

    args = build_parser().parse_args(["prefix-baseline", "--out", "x", "--method", "local"])
    assert args.method == "local"
    baseline = next(a for a in build_parser()._subparsers._group_actions[0].choices["prefix-baseline"]._actions
                    if a.dest == "method")
    assert tuple(baseline.choices) == METHODS


def test_analytic_cost_models_name_their_fanout_weight():
    """A designs file records the analytic model with its fanout weight, and is costed
    again the same way; a model string that names no usable weight is refused."""
    from experiments.prefix.cost_pools import pool_for_model
    from podracer.config import ConfigError

    graph = classic_adders(8)["kogge-stone"]
    for weight, model in ((0.0, "analytic-0"), (0.5, "analytic-0.5")):
        pool, name = make_pool("analytic", fanout_weight=weight)
        with pool:
            assert name == model and tuple(pool.costs([graph])[0]) == (G.area(graph), G.delay(graph, weight))
        with pool_for_model(model) as again:
            assert tuple(again.costs([graph])[0]) == (G.area(graph), G.delay(graph, weight))
    for bad in ("analytic-x", "analytic-nan", "analytic--1", "nothing"):
        with pytest.raises(ConfigError, match="unknown cost model"):
            pool_for_model(bad)


def test_a_rerun_into_the_same_out_leaves_only_its_own_front_as_verilog(tmp_path, capsys):
    """A second baseline (smaller front) into the same --out: front/ holds its modules only,
    not the first run's as well (two files would define module adder8_0)."""
    out = str(tmp_path / "x")
    for budget in ("40", "3"):
        main(["prefix-baseline", "--bits", "8", "--method", "random", "--budget", budget, "--cost", "analytic",
              "--out", out, "--json"])
        summary = json.loads(capsys.readouterr().out)
    written = sorted(os.path.join(out, "front", name) for name in os.listdir(os.path.join(out, "front")))
    assert written == sorted(summary["verilog"])


@pytest.mark.parametrize("args, message", [
    (["prefix-baseline", "--bits", "2", "--out", "{tmp}/x", "--cost", "analytic"], "--bits must be in"),
    (["prefix-baseline", "--bits", "100000", "--out", "{tmp}/x", "--cost", "analytic"], "--bits must be in"),
    (["prefix-baseline", "--budget", "0", "--out", "{tmp}/x", "--cost", "analytic"], "--budget must be >= 1"),
    (["prefix-baseline", "--method", "genetic", "--out", "{tmp}/x"], "invalid choice: 'genetic'"),
    (["prefix-baseline", "--out", "/proc/nope", "--cost", "analytic"], "--out '/proc/nope' is not writable"),
    (["prefix-baseline", "--cost", "analytic", "--cache", "{tmp}/c.jsonl", "--out", "{tmp}/x"],
     "--cache and --workers apply to --cost synthesis"),
    (["prefix-front", "{tmp}"], "designs.jsonl does not exist"),
    (["prefix-front", "{tmp}", "--out", "/proc/nope.png"], "--out '/proc/nope.png' cannot be written"),
])
def test_prefix_commands_user_errors_exit_2_with_one_line(tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as exit_info:
        main([a.replace("{tmp}", str(tmp_path)) for a in args])
    stderr = capsys.readouterr().err
    assert exit_info.value.code == 2, stderr
    assert message in stderr and len(stderr.strip().splitlines()) == 1, stderr


def test_prefix_baseline_without_pyosys_exits_2_naming_the_package(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(synthesis, "pyosys_version", lambda: None)
    with pytest.raises(SystemExit) as exit_info:
        main(["prefix-baseline", "--bits", "8", "--budget", "5", "--out", str(tmp_path / "x")])
    stderr = capsys.readouterr().err
    assert exit_info.value.code == 2 and "pip install pyosys" in stderr
    assert len(stderr.strip().splitlines()) == 1


def test_synthesis_baseline_end_to_end_and_a_rerun_synthesises_nothing(tmp_path):
    from experiments.prefix.fronts import run_baseline

    cache = str(tmp_path / "cache.jsonl")
    first = run_baseline(8, "random", 10, str(tmp_path / "a"), cost="synthesis", workers=1, cache_path=cache)
    assert first["designs"] == 10 and first["syntheses"] >= 10 and first["model"].startswith("synthesis:")
    again = run_baseline(8, "random", 10, str(tmp_path / "b"), cost="synthesis", workers=1, cache_path=cache)
    assert again["syntheses"] == 0 and again["cache_hit_rate"] == 1.0
    assert again["front"] == first["front"]


@pytest.mark.parametrize("row, problem", [
    ({"grid": [], "bits": 0}, "at least 2 rows"),
    ({"grid": ["1"], "bits": 1}, "at least 2 rows"),
    ({"grid": ["1", "11", "101", "1001"], "bits": 8}, "bits is 8 but the grid has 4 rows"),
    ({"grid": ["1", "11", "101", "1001"], "bits": 4, "area": "nan"}, "must be finite"),
])
def test_read_designs_refuses_a_malformed_design_with_its_line(tmp_path, row, problem):
    """A designs file whose design is too small, disagrees with its bits, or has a non-finite
    cost is a ValueError naming the line (prefix-front turns it into one line), not a
    traceback from deep in the graph code or a front drawn through NaN."""
    line = {"area": 3.0, "delay": 3.0, "model": "analytic-0", **row}
    (tmp_path / "designs.jsonl").write_text(json.dumps(line) + "\n")
    with pytest.raises(ValueError, match=f"designs.jsonl:1: not a design .*{problem}"):
        read_designs(str(tmp_path))


def test_prefix_baseline_synthesis_failure_exits_1_with_one_line(tmp_path, capsys, monkeypatch):
    """Yosys failing (here ABC on a library it cannot read) ends the command with one line
    naming the failure, not a traceback from the pool."""
    liberty = tmp_path / "cells.lib"
    liberty.write_text("library (broken) {\n  cell (x) { area : 1;\n")
    monkeypatch.setattr(synthesis, "LIBERTY", str(liberty))
    with pytest.raises(SystemExit) as exit_info:
        main(["prefix-baseline", "--bits", "8", "--budget", "3", "--workers", "1", "--out", str(tmp_path / "x"),
              "--cache", str(tmp_path / "cache.jsonl")])
    stderr = capsys.readouterr().err
    assert exit_info.value.code == 1, stderr
    assert "synthesis failed: Yosys exited with status 1 during its commands: ERROR: ABC" in stderr
    assert len(stderr.strip().splitlines()) == 1, stderr


def test_prefix_baseline_cache_that_cannot_be_written_exits_2_naming_it(tmp_path, capsys):
    """`--cache` naming a directory (or any path that cannot be appended to) is one line
    naming the option, before any synthesis; not a traceback, nor a wait for results that
    the cache would never let arrive."""
    with pytest.raises(SystemExit) as exit_info:
        main(["prefix-baseline", "--bits", "8", "--budget", "3", "--workers", "1", "--out", str(tmp_path / "x"),
              "--cache", str(tmp_path)])
    stderr = capsys.readouterr().err
    assert exit_info.value.code == 2, stderr
    assert f"--cache: the synthesis cache '{tmp_path}' cannot be read and appended to" in stderr
    assert len(stderr.strip().splitlines()) == 1, stderr
