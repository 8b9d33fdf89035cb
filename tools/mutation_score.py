"""Mutation score of one module, with mutmut's mutants run in one long-lived process.

mutmut 3 writes a copy of the module in which every function is a trampoline that calls, at
each call, the original or the mutant named by `MUTANT_UNDER_TEST`. JAX traces a jitted
function once per shape and caches the trace, so after `jax.clear_caches()` the next call
traces again and meets the mutant now named: one process imports JAX once and runs every
mutant's tests in turn, instead of a fresh process (JAX import and compiles) per mutant.

    python tools/mutation_score.py podracer/ops/returns.py tests/ops/test_returns.py \
        --out experiments/benchmarks/results/mutation/ops_returns.json [--sample 60 --seed 0]

Steps: (1) mutmut's own mutation operators write `mutants/podracer/` (the module mutated,
every other module copied unchanged); (2) the tests run once with `MUTANT_UNDER_TEST=stats`,
JAX's caches cleared before each test, recording which test calls which function (the tests
must pass); (3) for each mutant, the tests that call its function run in-process with `-x`:
a failure kills it, a pass lets it survive, no test means "no tests", and a run past its
wall limit (10x the tests' own time + 30 s) is a timeout: a watchdog ends the worker process
and a fresh one goes on from the results written so far. The test modules are imported
afresh for each mutant, so what they build at module level (a network, a loss) meets it, and
the recording counts a test file's import as part of each of its tests. Not part of CI or
the test suite.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MUTANTS = ROOT / "mutants"
PYTEST_ARGS = ["-q", "-x", "-n", "0", "-p", "no:cacheprovider", "-m", "not slow or costly", "--no-header",
               "-o", "addopts="]


def generate(module: str) -> list[str]:
    """Writes `mutants/podracer/` with `module` mutated by mutmut; returns the mutant names
    (`podracer.ops.returns.x_gae_advantages__mutmut_3`)."""
    from mutmut.mutation.file_mutation import mutate_file_contents
    from mutmut.utils.format_utils import get_mutant_name

    shutil.rmtree(MUTANTS / "podracer", ignore_errors=True)
    shutil.copytree(ROOT / "podracer", MUTANTS / "podracer", ignore=shutil.ignore_patterns("__pycache__"))
    path = Path(module)
    mutated = mutate_file_contents(str(path), (ROOT / path).read_text())
    (MUTANTS / path).write_text(mutated.code)
    return [get_mutant_name(path, name) for name in mutated.mutant_names]


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a proportion k/n."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def _function_of(mutant: str) -> str:
    return mutant.partition("__mutmut_")[0]


class _Recorder:
    """pytest plugin of the stats run: which mutmut functions each test calls, and its time.

    A test file's import (its collection) counts as part of each of its tests: a function it
    calls at module level (a network or loss built once for the file) is a function of every
    test in it."""

    def __init__(self) -> None:
        self.hits: dict[str, list[str]] = {}
        self.seconds: dict[str, float] = {}
        self.failed: list[str] = []
        self.collected: dict[str, list[str]] = {}
        self._start = 0.0

    def pytest_collectstart(self, collector) -> None:
        from mutmut.state import state

        state()._stats.clear()

    def pytest_collectreport(self, report) -> None:
        from mutmut.state import state

        if report.nodeid.endswith(".py"):
            self.collected[report.nodeid] = sorted(state()._stats)

    def test_hits(self) -> dict[str, list[str]]:
        return {t: sorted({*h, *self.collected.get(t.partition("::")[0], ())}) for t, h in self.hits.items()}

    def pytest_runtest_setup(self, item) -> None:
        import jax
        from mutmut.state import state

        jax.clear_caches()
        state()._stats.clear()
        self._start = time.perf_counter()

    def pytest_runtest_teardown(self, item) -> None:
        from mutmut.state import state

        self.seconds[item.nodeid] = time.perf_counter() - self._start
        self.hits[item.nodeid] = sorted(state()._stats)

    def pytest_runtest_logreport(self, report) -> None:
        if report.failed:
            self.failed.append(report.nodeid)


def worker(args: argparse.Namespace) -> None:
    """Runs the mutants not yet in the results file, one after another, in this process."""
    sys.path.insert(0, str(MUTANTS))
    os.chdir(ROOT)
    import podracer  # noqa: F401  # the mutated copy, before pytest puts the worktree on sys.path

    assert Path(podracer.__file__).is_relative_to(MUTANTS), podracer.__file__
    import jax
    import pytest

    state_path = Path(args.state)
    plan = json.loads(state_path.read_text())
    results_path = Path(args.results)
    done = set()
    if results_path.exists():
        done = {json.loads(line)["mutant"] for line in results_path.read_text().splitlines() if line.strip()}

    if "stats" not in plan:
        os.environ["MUTANT_UNDER_TEST"] = "stats"
        recorder = _Recorder()
        code = pytest.main([*PYTEST_ARGS, *plan["tests"]], plugins=[recorder])
        if code != 0 or recorder.failed:
            sys.exit(f"the tests fail on the unmutated module (exit {code}): {recorder.failed}")
        plan["stats"] = {"hits": recorder.test_hits(), "seconds": recorder.seconds}
        state_path.write_text(json.dumps(plan, indent=1))
        os._exit(0)  # a fresh process for the mutants: the stats run leaves pytest state behind

    hits, seconds = plan["stats"]["hits"], plan["stats"]["seconds"]
    with results_path.open("a") as out:
        for mutant in plan["mutants"]:
            if mutant in done:
                continue
            tests = [t for t, called in hits.items() if _function_of(mutant) in called]
            if not tests:
                out.write(json.dumps({"mutant": mutant, "status": "no tests", "seconds": 0.0}) + "\n")
                out.flush()
                continue
            limit = 10 * sum(seconds[t] for t in tests) + 30
            os.environ["MUTANT_UNDER_TEST"] = mutant
            jax.clear_caches()
            start = time.perf_counter()

            def expire(mutant=mutant, start=start, limit=limit) -> None:
                record = {"mutant": mutant, "status": "timeout", "seconds": time.perf_counter() - start, "limit": limit}
                out.write(json.dumps(record) + "\n")
                out.flush()
                os._exit(3)

            for name in [m for m in sys.modules if m == "tests" or m.startswith("tests.")]:
                del sys.modules[name]  # re-imported: their module-level calls meet this mutant
            watchdog = threading.Timer(limit, expire)
            watchdog.daemon = True
            watchdog.start()
            code = pytest.main([*PYTEST_ARGS, *tests])
            watchdog.cancel()
            # 2 or 4: a test file failed to import or collect under the mutant (4: pytest found
            # no test of a node id; every id was found in the unmutated recording run)
            status = {0: "survived", 1: "killed", 2: "killed", 4: "killed"}.get(int(code), f"error {int(code)}")
            record = {"mutant": mutant, "status": status, "seconds": round(time.perf_counter() - start, 2)}
            out.write(json.dumps(record) + "\n")
            out.flush()
    os._exit(0)


def summarise(plan: dict, results: list[dict]) -> dict:
    counts: dict[str, int] = {}
    for r in results:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    killed = counts.get("killed", 0) + counts.get("timeout", 0)
    run = len(results)
    low, high = wilson(killed, run)
    return {
        "module": plan["module"],
        "tests": plan["tests"],
        "mutants_total": plan["total"],
        "mutants_run": run,
        "sampled": plan["total"] != len(plan["mutants"]),
        "seed": plan["seed"],
        "counts": counts,
        "score": killed / run if run else None,
        "wilson95": [low, high],
        "survivors": sorted(r["mutant"] for r in results if r["status"] in ("survived", "no tests")),
        "results": results,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("module", help="source file to mutate, e.g. podracer/ops/returns.py")
    parser.add_argument("tests", nargs="*", help="test files or node ids that cover it")
    parser.add_argument("--out", required=True, help="JSON summary written here")
    parser.add_argument("--sample", type=int, default=0, help="score a uniform random sample of this many mutants")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", nargs="*", default=None, help="run only these mutant names")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--state", help=argparse.SUPPRESS)
    parser.add_argument("--results", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return

    out = Path(args.out)
    work = MUTANTS / "scores" / out.stem  # git-ignored; a rerun with the same arguments resumes
    work.mkdir(parents=True, exist_ok=True)
    state_path, results_path = work / "plan.json", work / "results.jsonl"
    names = generate(args.module)
    chosen = names
    if args.only:
        chosen = [n for n in names if n in set(args.only)]
    elif args.sample and args.sample < len(names):
        chosen = sorted(random.Random(args.seed).sample(names, args.sample), key=names.index)
    plan = {"module": args.module, "tests": args.tests, "total": len(names), "seed": args.seed, "mutants": chosen}
    if state_path.exists():
        old = json.loads(state_path.read_text())
        if {k: old[k] for k in plan} == plan:
            plan = old  # resume: keep the stats and the results so far
        else:
            results_path.unlink(missing_ok=True)
    state_path.write_text(json.dumps(plan, indent=1))

    env = dict(os.environ)
    env.setdefault("JAX_COMPILATION_CACHE_DIR", str(work / "jax-cache"))
    env["PYTHONPATH"] = str(ROOT)
    command = [sys.executable, __file__, args.module, "--out", args.out, "--state", str(state_path)]
    command += ["--results", str(results_path), "--worker"]
    while True:
        done = []
        if results_path.exists():
            done = [json.loads(line) for line in results_path.read_text().splitlines() if line.strip()]
        plan = json.loads(state_path.read_text())
        if "stats" in plan and len(done) >= len(plan["mutants"]):
            break
        print(f"{args.module}: {len(done)}/{len(plan['mutants'])} mutants run", flush=True)
        code = subprocess.call(command, env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
        if code not in (0, 3):
            sys.exit(f"worker failed with exit code {code}")
    summary = summarise(plan, done)
    out.write_text(json.dumps(summary, indent=1) + "\n")
    c = summary["counts"]
    print(
        f"{args.module}: {summary['mutants_run']}/{summary['mutants_total']} run, killed {c.get('killed', 0)}, "
        f"survived {c.get('survived', 0)}, no tests {c.get('no tests', 0)}, timeout {c.get('timeout', 0)}, "
        f"score {summary['score']:.1%} (95% Wilson {summary['wilson95'][0]:.0%}-{summary['wilson95'][1]:.0%})"
    )


if __name__ == "__main__":
    main()
