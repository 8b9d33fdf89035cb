"""Syntheses per second of the prefix adders' synthesis, and the classic adders' costs.

    python tools/synthesis_speed.py --bits 16 --graphs 60 --workers 2 [--out FILE.json]
        [--compare-abc /usr/bin/yosys-abc --compare-liberty /usr/share/qflow/tech/osu018/osu018_stdcells.lib]

Costs `--graphs` distinct random legal graphs of `--bits` bits through a new `RewardPool` of
`--workers` threads (no cache file), after one warm-up synthesis per worker (so the rate is
the steady state, not the workers' start), `--rounds` times, and reports the median rate;
then synthesises the classic adders at 16 and 32 bits. This installation's flow is pyosys onto the packaged library
(`experiments.prefix.synthesis`). With `--compare-abc` and `--compare-liberty`, the same
graphs also go through a `yosys-abc` binary and a Liberty file of another installation (one
`yosys-abc` process per synthesis, reading the graph as BLIF and running the same ABC flow),
for a comparison; the project itself needs neither.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import functools
import json
import os
import platform
import subprocess
import tempfile
import time
from typing import Any

import numpy as np

from experiments.prefix.builders import classic_adders
from experiments.prefix.graph import random_graph
from experiments.prefix.netlist import to_blif
from experiments.prefix.reward_pool import RewardPool
from experiments.prefix.synthesis import FLOW, SynthesisResult, find_synthesis, parse_stime, synthesize


def abc_binary_synthesize(nodes: np.ndarray, abc: str, liberty: str) -> SynthesisResult:
    """One synthesis by a `yosys-abc` binary: `read_lib; read_blif; FLOW` in a process of its own."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="podracer-abc-") as tmp:
        path = os.path.join(tmp, "adder.blif")
        with open(path, "w") as f:
            f.write(to_blif(np.asarray(nodes, bool)))
        result = subprocess.run([abc, "-c", f"read_lib -w {liberty}; read_blif {path}; {FLOW}"],
                                capture_output=True, text=True, timeout=120, check=True, cwd=tmp)
    area, delay = parse_stime(result.stdout + result.stderr)
    return SynthesisResult(area, delay, time.perf_counter() - start)


def measure(make_pool: Any, graphs: list[np.ndarray], warmup: list[np.ndarray]) -> float:
    """Syntheses per second of `graphs` through a new pool, after `warmup` (one graph per
    worker, waited for together)."""
    with make_pool() as pool:
        pool.costs(warmup)
        start = time.perf_counter()
        pool.costs(graphs)
        return len(graphs) / (time.perf_counter() - start)


def summary(rates: list[float], workers: int, graphs: int) -> dict[str, Any]:
    return {"syntheses_per_s": round(float(np.median(rates)), 2), "rounds": [round(r, 2) for r in rates],
            "syntheses_per_round": graphs, "workers": workers}


def classic_costs(evaluate: Any) -> dict[str, dict[str, list[float]]]:
    """`{bits: {adder: [area, delay_ps]}}` of the classic adders at 16 and 32 bits."""
    return {str(bits): {name: list(evaluate(nodes)[:2]) for name, nodes in classic_adders(bits).items()}
            for bits in (16, 32)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bits", type=int, default=16)
    parser.add_argument("--graphs", type=int, default=60)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=5, help="rounds per flow (the median is reported)")
    parser.add_argument("--compare-abc", default=None, help="a yosys-abc binary to compare with")
    parser.add_argument("--compare-liberty", default=None, help="the Liberty file it maps onto")
    parser.add_argument("--out", default=None, help="write the record as JSON here")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    unique: dict[bytes, np.ndarray] = {}
    while len(unique) < args.graphs + args.workers:
        nodes = random_graph(rng, args.bits, rng.random() * 0.3)
        unique.setdefault(nodes.tobytes(), nodes)
    graphs = list(unique.values())
    warmup, graphs = graphs[:args.workers], graphs[args.workers:]
    spec = find_synthesis()
    record: dict[str, Any] = {"command": "python tools/synthesis_speed.py " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if v is not None and k != "out"),
        "bits": args.bits, "cpu_count": os.cpu_count(), "machine": platform.machine(), "flows": {}}
    flows = {"pyosys": lambda: RewardPool(spec, executor=cf.ThreadPoolExecutor(args.workers))}
    compare = None
    if args.compare_abc and args.compare_liberty:
        compare = functools.partial(abc_binary_synthesize, abc=args.compare_abc, liberty=args.compare_liberty)
        flows["yosys-abc"] = lambda: RewardPool(evaluate=compare, identity="compare",
                                                executor=cf.ThreadPoolExecutor(args.workers))
    rates: dict[str, list[float]] = {name: [] for name in flows}
    for _ in range(args.rounds):  # the flows take turns, so a busy moment of the machine hits both
        for name, make_pool in flows.items():
            rates[name].append(measure(make_pool, graphs, warmup))
    record["flows"]["pyosys"] = {"record": spec.record(), **summary(rates["pyosys"], args.workers, len(graphs)),
                                 "classic_adders": classic_costs(functools.partial(synthesize, spec=spec))}
    if compare is not None:
        version = subprocess.run([args.compare_abc, "-c", "version"], capture_output=True, text=True,
                                 check=False).stdout.strip().splitlines()[-1:]
        record["flows"]["yosys-abc"] = {"abc": args.compare_abc, "abc_version": " ".join(version),
                                        "liberty": os.path.basename(args.compare_liberty),
                                        **summary(rates["yosys-abc"], args.workers, len(graphs)),
                                        "classic_adders": classic_costs(compare)}
    text = json.dumps(record, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
