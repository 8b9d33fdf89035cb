"""`podracer bench prefix`: the agent's designs are every graph its own synthesis cache holds,
their number is the budget every baseline gets, and every front is judged alike."""

import concurrent.futures as cf
import json

import numpy as np
import pytest

from experiments.cli import main
from experiments.prefix import bench as bench_prefix
from experiments.prefix import graph as G
from experiments.prefix.builders import classic_adders
from experiments.prefix.front import grid_rows
from experiments.prefix.reward_pool import CacheMismatch, RewardPool, analytic_cost, cache_designs, graph_key


def random_graphs(bits, count, seed):
    rng = np.random.default_rng(seed)
    return [G.random_graph(rng, bits, rng.random() * 0.5) for _ in range(count)]


def test_a_cache_file_records_every_graph_synthesised_under_its_flow(tmp_path):
    """The cache rows hold the graphs: `cache_designs` gives back each distinct graph once
    with its cost, skips its toolchain header, rows of another flow (a pool refuses to
    write them) and rows without a graph (older caches)."""
    path = str(tmp_path / "cache.jsonl")
    graphs = random_graphs(8, 10, seed=1) + list(classic_adders(8).values())
    with RewardPool(evaluate=analytic_cost, identity="analytic-0", executor=cf.ThreadPoolExecutor(2),
                    cache_path=path) as pool:
        pool.costs(graphs + graphs[:4], timeout_s=30)
    with pytest.raises(CacheMismatch):
        RewardPool(evaluate=analytic_cost, identity="another-flow", executor=cf.ThreadPoolExecutor(1), cache_path=path)
    with open(path, "a") as f:
        for g in graphs[:3]:  # rows of another flow, written by hand
            row = {"key": graph_key(g, "another-flow"), "area": 1.0, "delay": 1.0, "grid": grid_rows(g)}
            f.write(json.dumps(row) + "\n")
        f.write(json.dumps({"key": "0" * 32, "area": 1.0, "delay": 1.0}) + "\n")
    designs = cache_designs(path, "analytic-0")
    unique = {g.tobytes(): g for g in graphs}
    assert len(designs) == len(unique)
    assert {d.nodes.tobytes() for d in designs} == set(unique)
    for d in designs:
        assert (d.area, d.delay) == (G.area(d.nodes), G.delay(d.nodes))
    assert len(cache_designs(path, "another-flow")) == 3


def test_cache_designs_skips_a_damaged_row_without_its_key(tmp_path):
    """A row whose key was lost (hand-edited or damaged) is skipped like any other bad row,
    not a KeyError out of `bench prefix --run-dir`."""
    path = tmp_path / "cache.jsonl"
    good, damaged = classic_adders(8)["sklansky"], classic_adders(8)["ripple"]
    with RewardPool(evaluate=analytic_cost, identity="analytic-0", executor=cf.ThreadPoolExecutor(1),
                    cache_path=str(path)) as pool:
        pool.costs([good], timeout_s=30)
    row = {"area": 7.0, "delay": 7.0, "grid": grid_rows(damaged)}  # no "key"
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")
    designs = cache_designs(str(path), "analytic-0")
    assert [d.nodes.tobytes() for d in designs] == [good.tobytes()]


def test_bench_prefix_user_errors_exit_2_before_training(tmp_path, capsys):
    cases = [
        (["--bits", "16", "--budget", "100"], "needs --out"),
        (["--bits", "16", "--out", str(tmp_path)], "needs --budget >= 1"),
        (["--bits", "16", "--budget", "10", "--out", str(tmp_path), "--preset", "dqn-prefix16-anakin"],
         "synthesis-reward prefix adder"),
        (["--bits", "32", "--budget", "10", "--out", str(tmp_path), "--preset", "dqn-prefix16-sebulba"],
         "--bits 32 but the preset trains on PrefixAdderSynth-16"),
        (["--bits", "7", "--budget", "10", "--out", str(tmp_path)],
         "--bits 7: no preset dqn-prefix7-front-sebulba; name one and the width, e.g. --preset "
         "dqn-prefix16-front-sebulba "
         "--env.id PrefixAdderSynth-7"),
        (["--run-dir", str(tmp_path), "--out", str(tmp_path / "o")], "synthesis-cache.jsonl does not exist"),
    ]
    for args, message in cases:
        with pytest.raises(SystemExit) as exit_info:
            main(["bench", "prefix", *args])
        stderr = capsys.readouterr().err
        assert exit_info.value.code == 2 and message in stderr, (args, stderr)
        assert len(stderr.strip().splitlines()) == 1


@pytest.mark.slow  # ~13 s: three synthesis pools (Yosys processes), fronts and plots
def test_bench_prefix_on_a_finished_run_gives_the_baselines_its_budget(tmp_path):
    """A run directory whose cache holds the agent's syntheses: the table's budget is their
    number, every baseline evaluates exactly that many distinct graphs, every front is judged
    against the same reference point, and the verdict follows the hypervolumes."""
    from experiments.prefix.cost_pools import make_pool

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    pool, _ = make_pool("synthesis", workers=1, cache_path=str(run_dir / bench_prefix.AGENT_CACHE))
    graphs = random_graphs(6, 9, seed=2) + [classic_adders(6)["sklansky"]]
    try:
        pool.costs(graphs)
    finally:
        pool.close()
    spent = len({g.tobytes() for g in graphs})
    table = bench_prefix.compare(str(tmp_path / "out"), run_dir=str(run_dir), workers=1, log=lambda line: None)
    assert table["bits"] == 6 and table["budget"] == spent
    rows = table["rows"]
    assert set(rows) == {"agent", "anneal", "random", "local"}
    references = set()
    for name, row in rows.items():
        assert row["designs"] == spent, name
        with open(f"{row['dir']}/front.json") as f:
            references.add(tuple(json.load(f)["hypervolume_reference"]))
    assert len(references) == 1
    for method in bench_prefix.BASELINES:
        assert table["agent_beats"][method] == (rows["agent"]["hypervolume"] > rows[method]["hypervolume"])
    with open(tmp_path / "out" / "comparison.json") as f:
        assert json.load(f) == json.loads(json.dumps(table))
    assert "unique syntheses each" in bench_prefix.format_table(table)
