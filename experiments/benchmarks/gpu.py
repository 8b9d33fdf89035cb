"""`podracer bench gpu --out FILE`: one unattended benchmark of an accelerator host, in at
most 8 minutes on one H100, written as one JSON file of records.

Parts, each in a process of its own with its own time budget (a part that fails or runs
past its budget is recorded as such and the next one runs; the file is rewritten after
every part, so an interrupted benchmark keeps what it measured):

- `anakin-minatar`: Anakin PPO on MinAtar Breakout, 4 seeds in one program, against the
  hand-written reference (`experiments.benchmarks.reference_ppo`), their calls alternating
  as `bench anakin --compare-reference` does.
- `anakin-cartpole`: the same on CartPole with 1024 agents (environments).
- `brax`: PPO (`ppo-inverted-pendulum-brax-anakin`, the record's own fields) and SAC
  (`sac-inverted-pendulum-brax-anakin`, under `sac`; one gradient step per env step, so its
  env steps/s are also gradient steps/s) on Brax's inverted_pendulum when the brax extra
  imports, else skipped with the reason.
- `sebulba-pong`: `bench sebulba` on `ppo-pong-sebulba-fast` (`--arch.layout auto`): env
  steps/s of the actors and of training against EnvPool's own rate on this host, with the
  layout chosen and why.
- `sebulba-pong-curve`: the same preset trained for the part's minutes; its return curve.

`--smoke` runs every part with tiny sizes and budgets (on a CPU too): the test suite's check
that the benchmark runs end to end.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from typing import Any, Callable, NamedTuple

import jax

from experiments.bench import bench_anakin
from experiments.presets import PRESETS
from experiments.train import train
from podracer.agents import SACConfig
from sebulba import autolayout, bench, benchmark

STDERR_TAIL = 2000  # characters of a failed part's stderr kept in its record


class Part(NamedTuple):
    run: Callable[[bool, float], dict[str, Any]]  # (smoke, seconds it may take) -> its record
    budget_s: float  # wall seconds for the whole part, its process's start included
    smoke_budget_s: float  # generous: a loaded 2-core CI machine compiles slowly


def _anakin_vs_reference(preset: str, smoke: bool, num_envs: int, num_seeds: int) -> dict[str, Any]:
    config = PRESETS[preset]()
    arch = dataclasses.replace(config.arch, devices=(0,), num_seeds=num_seeds, num_envs=num_envs)
    agent = config.agent
    if smoke:  # the smallest programs that still run every piece: compilation is the smoke's cost
        arch = dataclasses.replace(arch, updates_per_call=2, rollout_length=min(arch.rollout_length, 16))
        agent = dataclasses.replace(agent, num_epochs=1, num_minibatches=1)
    config = dataclasses.replace(config, arch=arch, agent=agent)
    return {"preset": preset, **bench_anakin(config, repeats=1 if smoke else 5, compare_reference=True)}


def anakin_minatar(smoke: bool, seconds: float) -> dict[str, Any]:
    """Anakin PPO on MinAtar Breakout, 4 seeds, against the hand-written reference."""
    return _anakin_vs_reference("ppo-breakout-minatar-anakin", smoke, 8 if smoke else 128, 4)


def anakin_cartpole(smoke: bool, seconds: float) -> dict[str, Any]:
    """Anakin PPO on CartPole with 1024 agents, against the hand-written reference."""
    return _anakin_vs_reference("ppo-cartpole-anakin", smoke, 16 if smoke else 1024, 1)


def _brax_anakin(preset: str, smoke: bool) -> dict[str, Any]:
    """`bench_anakin` of a Brax preset on one device; with `smoke`, one update of 4 envs x 8
    steps per call (SAC taking 2 gradient steps of 16 per update from the first)."""
    config = PRESETS[preset]()
    arch = dataclasses.replace(config.arch, devices=(0,))
    agent = config.agent
    if smoke:
        arch = dataclasses.replace(arch, num_envs=4, updates_per_call=1, rollout_length=8)
        if isinstance(agent, SACConfig):
            agent = dataclasses.replace(agent, learning_starts=0, batch_size=16, buffer_size=1024,
                                        replay_ratio=None, gradient_steps=2)
    config = dataclasses.replace(config, arch=arch, agent=agent)
    return {"preset": preset, **bench_anakin(config, repeats=1 if smoke else 5)}


def brax(smoke: bool, seconds: float) -> dict[str, Any]:
    """PPO and SAC on a Brax task under Anakin, if the brax extra imports: PPO's record,
    SAC's under `sac`."""
    if importlib.util.find_spec("brax") is None:
        return {"status": "skipped", "reason": "brax is not installed (pip install -e '.[brax]')"}
    ppo = _brax_anakin("ppo-inverted-pendulum-brax-anakin", smoke)
    return {**ppo, "sac": _brax_anakin("sac-inverted-pendulum-brax-anakin", smoke)}


def _pong(smoke: bool) -> Any:
    config = PRESETS["ppo-pong-sebulba-fast"]()
    if smoke:
        config = dataclasses.replace(config, arch=dataclasses.replace(config.arch, num_envs=4, rollout_length=8),
                                     agent=dataclasses.replace(config.agent, num_minibatches=1, num_epochs=1))
    return config


def sebulba_pong(smoke: bool, seconds: float) -> dict[str, Any]:
    """`bench sebulba` on `ppo-pong-sebulba-fast`: the auto layout's env steps/s against
    EnvPool's own rate on this host (`env_limit_sps`: the same threads stepping only the
    environments; `layout.env_rate`: one batch stepped alone)."""
    # bench times 7 quantities for `seconds` each in all (auto and manual) and trains for
    # `seconds` more: a ninth of the part's time each, the rest for warm-ups.
    result = bench(_pong(smoke), seconds=1.0 if smoke else seconds / 9, rounds=1 if smoke else 3)
    return {"preset": "ppo-pong-sebulba-fast", **result,
            "actor_over_envpool": result["actor_sps"] / result["env_limit_sps"],
            "training_over_envpool": result["sps"] / result["env_limit_sps"]}


def sebulba_pong_curve(smoke: bool, seconds: float) -> dict[str, Any]:
    """`ppo-pong-sebulba-fast` trained for `seconds` (after its first metrics row): the
    return curve, one point per metrics row."""
    config = _pong(smoke)
    rows: list[dict[str, Any]] = []
    first: list[float] = []

    def on_metrics(row: dict[str, Any]) -> None:
        rows.append({key: row[key] for key in ("env_steps", "wall_s", "sps", "episode_return") if key in row})
        if not first:
            first.append(time.monotonic())

    def should_stop() -> bool:
        return bool(first) and time.monotonic() > first[0] + seconds

    with tempfile.TemporaryDirectory(prefix="podracer-gpu-bench-") as run_dir:
        config = dataclasses.replace(config, run_dir=os.path.join(run_dir, "run"))
        train(config, console=False, on_metrics=on_metrics, should_stop=should_stop)
    return {"preset": "ppo-pong-sebulba-fast", "seconds": seconds, "rows": rows,
            "final_env_steps": rows[-1]["env_steps"] if rows else 0}


# Budgets sum to 7.9 minutes: what each needs on one H100 with its compilation, and the
# process starts (~10 s each); `brax` compiles two programs (PPO's and SAC's).
PARTS: dict[str, Part] = {
    "anakin-minatar": Part(anakin_minatar, 70.0, 400.0),
    "anakin-cartpole": Part(anakin_cartpole, 50.0, 400.0),
    "brax": Part(brax, 95.0, 600.0),  # smoke: two Brax programs compile, ~300 s on 2 loaded cores
    "sebulba-pong": Part(sebulba_pong, 150.0, 400.0),
    "sebulba-pong-curve": Part(sebulba_pong_curve, 110.0, 400.0),
}
# Seconds a part's process takes before and after its measurement (start, compilation).
OVERHEAD_S = {"sebulba-pong": 60.0, "sebulba-pong-curve": 50.0}


def run_gpu_bench(out: str, smoke: bool = False, parts: list[str] | None = None,
                  log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run every part (or `parts`) in turn and write the records to `out` after each.

    Args:
      out: the JSON file to write.
      smoke: tiny sizes and budgets (a CPU check that every part runs).
      parts: names from `PARTS` to run; all by default.
      log: where one line per part goes.

    Returns:
      What `out` holds: `{"smoke", "started", "parts": [record, ...], "total_s"}`, each
      record with `part`, `status` ("ok", "skipped", "failed" or "timeout") and `wall_s`.
    """
    names = list(PARTS) if parts is None else parts
    unknown = [name for name in names if name not in PARTS]
    if unknown:
        raise ValueError(f"unknown parts {unknown}; choose from {list(PARTS)}")
    report: dict[str, Any] = {"smoke": smoke, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                              "parts": []}
    start = time.monotonic()
    for name in names:
        record = _run_part(name, smoke)
        report["parts"].append(record)
        report["total_s"] = round(time.monotonic() - start, 1)
        _save(out, report)
        log(f"bench gpu: {name}: {record['status']} in {record['wall_s']:.0f} s")
    return report


def _run_part(name: str, smoke: bool) -> dict[str, Any]:
    """Run part `name` in a process of its own, within its budget; its record."""
    part = PARTS[name]
    budget = part.smoke_budget_s if smoke else part.budget_s
    seconds = 1.0 if smoke else max(5.0, budget - OVERHEAD_S.get(name, 0.0))
    with tempfile.TemporaryDirectory(prefix="podracer-gpu-part-") as directory:
        result_path = os.path.join(directory, "result.json")
        command = [sys.executable, "-m", "experiments.benchmarks.gpu", "--part", name, "--result", result_path,
                   "--seconds", str(seconds)] + (["--smoke"] if smoke else [])
        began = time.monotonic()
        try:
            done = subprocess.run(command, timeout=budget, capture_output=True, text=True, check=False)
        except subprocess.TimeoutExpired as expired:
            stderr = expired.stderr.decode(errors="replace") if isinstance(expired.stderr, bytes) else expired.stderr
            return {"part": name, "status": "timeout", "budget_s": budget, "wall_s": time.monotonic() - began,
                    "stderr_tail": (stderr or "")[-STDERR_TAIL:]}
        wall = time.monotonic() - began
        if done.returncode != 0 or not os.path.exists(result_path):
            return {"part": name, "status": "failed", "returncode": done.returncode, "budget_s": budget,
                    "wall_s": wall, "stderr_tail": done.stderr[-STDERR_TAIL:]}
        with open(result_path, encoding="utf-8") as f:
            result = json.load(f)
    return {"part": name, "status": result.pop("status", "ok"), "budget_s": budget, "wall_s": wall, **result}


def _save(path: str, report: dict[str, Any]) -> None:
    """Write `report` to `path` whole (a temporary file renamed over it)."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=directory, delete=False, suffix=".tmp", encoding="utf-8") as f:
        json.dump(report, f, indent=2)
    os.replace(f.name, path)


def _part_main(argv: list[str] | None = None) -> None:
    """One part, in the process `_run_part` starts: its record to `--result`."""
    parser = argparse.ArgumentParser(description="one part of podracer bench gpu")
    parser.add_argument("--part", choices=list(PARTS), required=True)
    parser.add_argument("--result", required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    # EnvPool builds Gymnasium spaces from float64 bounds; Gymnasium warns on every one.
    warnings.filterwarnings("ignore", message=".*precision lowered by casting to float32", category=UserWarning)
    if args.smoke:  # what a smoke measures means nothing: only that every piece runs
        benchmark.WARMUP_S, autolayout.TRIAL_S = 0.1, 0.1
    record = PARTS[args.part].run(args.smoke, args.seconds)
    record = {"backend": jax.default_backend(), "device": str(jax.devices()[0].device_kind), **record}
    with open(args.result, "w", encoding="utf-8") as f:
        json.dump(record, f, default=float)


if __name__ == "__main__":
    _part_main()
