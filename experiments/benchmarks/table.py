"""`podracer bench table`: train presets over seeds, evaluate at milestones, write a table.

For each preset, one run trains `seeds` agents in one program (`arch.num_seeds`) in
`OUT/runs/<preset>`. The run stops (with a checkpoint) at each milestone, every seed's
policy is evaluated there with `podracer evaluate`'s code (`experiments.evaluate`), and the
run resumes, exactly, to the next milestone. Milestones are fractions of the budget (or
env steps); a run stops after the first host call that reaches one, and the table reports
the env steps it was evaluated at. Evaluations are kept in `OUT/runs/<preset>/bench.json`:
running the same command again skips what is done and resumes an interrupted run.
`OUT/results.md` and `OUT/results.json` hold the table, `OUT/<env>.png` the curves.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import os
import time
from typing import Any, Callable, Sequence

import numpy as np

from anakin import runner
from anakin.config import AnakinConfig
from experiments import train as train_lib
from experiments.benchmarks import report
from experiments.evaluate import evaluate
from experiments.overrides import apply_overrides, split_overrides
from experiments.presets import all_presets
from experiments.run_dir import load_run_config
from experiments.startup import first_difference
from podracer.agents import algorithms
from podracer.checkpoint import Checkpointer, checkpoint_dir
from podracer.config import Config, ConfigError, to_dict
from podracer.logging import read_jsonl

DEFAULT_MILESTONES = (0.13, 0.51, 0.99)  # 1.3M, 5.1M and 9.9M of a 10M budget (gymnax-blines' points)
POLICIES = ("auto", "greedy", "sample")
# The settings `bench_config` decides: an override of one would be replaced without a word.
OWNED_FIELDS = {
    "run_dir": "each preset runs in OUT/runs/PRESET; choose --out",
    "arch.num_seeds": "use --seeds",
    "log.console": "it prints its own progress",
    "checkpoint.every_updates": "it checkpoints at its milestones",
}


def algorithm_name(config: Config) -> str:
    return next((name for name, algorithm in algorithms().items() if isinstance(config.agent, algorithm.config)),
                type(config.agent).__name__)


def evaluation_policy(policy: str, config: Config) -> str:
    """`auto`: sample from actor-critics' policies (as gymnax-blines evaluates PPO), act
    greedily for Q-learning (PQN and DQN evaluate with epsilon 0)."""
    if policy != "auto":
        return policy
    return "sample" if algorithm_name(config) in ("ppo", "impala") else "greedy"


def final_env_steps(config: Config) -> int:
    """Env steps (one seed) the run ends at: whole updates of `num_envs * rollout_length`."""
    per_update = config.arch.num_envs * config.arch.rollout_length
    return (config.total_env_steps // per_update) * per_update


def milestone_steps(config: Config, milestones: Sequence[float]) -> list[int]:
    """Targets in env steps: a milestone <= 1 is a fraction of the budget, above 1 env steps."""
    final = final_env_steps(config)
    targets = []
    for m in milestones:
        if not math.isfinite(m):
            raise ConfigError(f"--milestones: {m} is neither a fraction in (0, 1] nor env steps <= the run's {final}")
        target = min(int(round(m * config.total_env_steps)), final) if m <= 1 else int(m)
        if m <= 0 or target > final:
            raise ConfigError(f"--milestones: {m} is neither a fraction in (0, 1] nor env steps <= the run's {final}")
        targets.append(max(1, target))
    if targets != sorted(set(targets)):
        raise ConfigError(f"--milestones must increase, got {list(milestones)}")
    return targets


def bench_config(config: Config, seeds: int, run_dir: str) -> Config:
    """The preset as the benchmark trains it: `seeds` agents in one program, checkpoints
    only at milestones (the stops) and at the end, no console bar."""
    if not isinstance(config.arch, AnakinConfig):
        raise ConfigError(f"bench table trains Anakin presets; {type(config.arch).__name__} is not one")
    if seeds < 1:
        raise ConfigError(f"--seeds must be >= 1, got {seeds}")
    return dataclasses.replace(
        config, run_dir=run_dir, arch=dataclasses.replace(config.arch, num_seeds=seeds),
        log=dataclasses.replace(config.log, console=False),
        checkpoint=dataclasses.replace(config.checkpoint, every_updates=0),
    )


class _StopAt:
    """`should_stop` that ends a run after the host call reaching `target` env steps.

    The Anakin runner dispatches call k + 1 before it reads call k's row, and asks
    `should_stop` with one call in flight: stop when that call reaches the target.
    """

    def __init__(self, start: int, target: int, call_steps: int, final: int, user_stop: Callable[[], bool]):
        self.seen, self.target, self.call_steps, self.final = start, target, call_steps, final
        self.user_stop = user_stop

    def on_metrics(self, row: dict[str, Any]) -> None:
        self.seen = int(row["env_steps"])

    def __call__(self) -> bool:
        return self.user_stop() or min(self.seen + self.call_steps, self.final) >= self.target


def resolve_preset(name: str, overrides: Sequence[str]) -> Config:
    presets = all_presets()

    if name not in presets:
        close = difflib.get_close_matches(name, list(presets), n=1)
        raise ConfigError(f"unknown preset {name!r}" + (f"; did you mean {close[0]}?" if close else ""))
    return apply_overrides(presets[name](), list(overrides))


def check_overrides(overrides: Sequence[str]) -> None:
    """A one-line error for an override of a setting the benchmark decides (`OWNED_FIELDS`)."""
    for path, _ in split_overrides(list(overrides)):
        if path in OWNED_FIELDS:
            raise ConfigError(f"--{path.replace('_', '-')}: bench table sets it ({OWNED_FIELDS[path]})")


def _check_same_config(config: Config) -> None:
    """A run directory left by an earlier benchmark continues only with the same config;
    where the directory is (`run_dir`: `--out` written another way, or moved) may differ."""
    if not os.path.exists(os.path.join(config.run_dir, "config.json")):
        return
    before, now = ({**to_dict(c), "run_dir": None} for c in (load_run_config(config.run_dir), config))
    difference = first_difference(before, now)
    if difference is not None:
        path, was, is_now = difference
        raise ConfigError(f"{config.run_dir} holds a run with another config ({path}): {was} there, {is_now} here; "
                          "rerun it as it was made or choose another --out")


def _check_same_evaluation(run_dir: str, targets: list[int], episodes: int, policy: str) -> None:
    """A run already evaluated continues only with the same milestones, episodes and policy:
    a milestone it has passed cannot be evaluated any more (the run has trained past it), and
    the table would mix evaluations of different settings."""
    record = _load(os.path.join(run_dir, "bench.json"))
    evaluated = sorted(e["target"] for e in record["evaluations"])
    if not evaluated:
        return
    recorded = record.get("targets")
    if recorded is None:  # a record of an earlier version: only its evaluations tell its milestones
        recorded = evaluated
        same = set(evaluated) <= set(targets) and all(t in evaluated or t > evaluated[-1] for t in targets)
    else:
        same = recorded == targets
    if not same:
        raise ConfigError(f"{run_dir} was evaluated at milestones of {_env_steps(recorded)} env steps, not "
                          f"{_env_steps(targets)}; rerun it with the same --milestones or choose another --out")
    for option, before, now in (("--episodes", record.get("episodes"), episodes),
                                ("--policy", record.get("policy"), policy)):
        if before is not None and before != now:
            raise ConfigError(f"{run_dir} was evaluated with {option} {before}, not {now}; rerun it with the same "
                              f"{option} or choose another --out")


def _env_steps(targets: Sequence[int]) -> str:
    return ", ".join(f"{t:,}" for t in targets)


def _load(path: str) -> dict[str, Any]:
    if not os.path.exists(path):
        return {"evaluations": []}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _save(path: str, data: dict[str, Any]) -> None:
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2)
    os.replace(path + ".tmp", path)


def run_preset(name: str, config: Config, targets: list[int], episodes: int, policy: str,
               user_stop: Callable[[], bool], log: Callable[[str], None]) -> dict[str, Any] | None:
    """Train one preset to each milestone and evaluate every seed there. Returns the
    preset's record, or None when `user_stop` interrupted it (rerun to continue)."""
    run_dir = config.run_dir
    os.makedirs(run_dir, exist_ok=True)
    record_path = os.path.join(run_dir, "bench.json")
    record = _load(record_path)
    record.update(preset=name, env=config.env.id, algorithm=algorithm_name(config), seeds=config.arch.num_seeds,
                  episodes=episodes, policy=policy, targets=targets)
    done = {e["target"] for e in record["evaluations"]}
    call_steps = config.arch.updates_per_call * config.arch.num_envs * config.arch.rollout_length
    for target in targets:
        if target in done:
            continue
        progress = _latest_progress(Checkpointer, checkpoint_dir(run_dir))
        if progress is None or progress.env_steps < target:
            stop = _StopAt(0 if progress is None else progress.env_steps, target, call_steps,
                           final_env_steps(config), user_stop)
            if progress is None:
                train_lib.train(config, name=name, console=False, on_metrics=stop.on_metrics, should_stop=stop)
            else:
                train_lib.resume(run_dir, console=False, on_metrics=stop.on_metrics, should_stop=stop)
            if user_stop():
                return None
            progress = _latest_progress(Checkpointer, checkpoint_dir(run_dir))
        start = time.perf_counter()
        returns = [evaluate(run_dir, episodes=episodes, seed=0, agent_seed=k, sample=policy == "sample")["mean_return"]
                   for k in range(config.arch.num_seeds)]
        record["evaluations"].append({
            "target": target, "env_steps": progress.env_steps, "returns": returns, "train_wall_s": progress.wall_s,
            "eval_wall_s": time.perf_counter() - start,
        })
        _save(record_path, record)
        log(f"{name}: {progress.env_steps:,} env steps, return {_mean_se(returns)} ({len(returns)} seeds), "
            f"{progress.wall_s:.0f} s of training")
    record["evaluations"].sort(key=lambda e: e["target"])
    record["sps"] = _training_sps(run_dir)
    _save(record_path, record)
    return record


def _latest_progress(checkpointer_cls: Any, directory: str):
    if not os.path.isdir(directory):
        return None
    with checkpointer_cls(directory, read_only=True) as checkpoints:
        return None if checkpoints.latest_step() is None else checkpoints.progress()


def _training_sps(run_dir: str) -> float | None:
    """Median env steps/s of the run's rows (all seeds), the compile rows excluded."""
    path = os.path.join(run_dir, "metrics.jsonl")
    rows = read_jsonl(path) if os.path.exists(path) else []
    sps = [r["sps"] for r in rows[1:]] or [r["sps"] for r in rows]
    return float(np.median(sps)) if sps else None


def _mean_se(values: Sequence[float]) -> str:
    values = np.asarray(values, float)
    if values.size < 2:
        return f"{values.mean():.1f}"
    return f"{values.mean():.1f} ± {values.std(ddof=1) / np.sqrt(values.size):.1f}"


def run_table(presets: Sequence[str], seeds: int, out: str, overrides: Sequence[str] = (),
              milestones: Sequence[float] = DEFAULT_MILESTONES, episodes: int = 128, policy: str = "auto",
              user_stop: Callable[[], bool] = lambda: False, log: Callable[[str], None] = print) -> str | None:
    """Train and evaluate every preset, then write `out/results.md`; returns its path (None
    if `user_stop` interrupted the benchmark: the same call continues it)."""
    if not presets:
        raise ConfigError("--presets: name at least one preset")
    if policy not in POLICIES:
        raise ConfigError(f"--policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    if episodes < 1:
        raise ConfigError(f"--episodes must be >= 1, got {episodes}")
    check_overrides(overrides)
    # Validate everything before the first compile.
    plans = []
    for name in presets:
        config = bench_config(resolve_preset(name, overrides), seeds, os.path.join(out, "runs", name))
        runner.setup(config)
        _check_same_config(config)
        targets, preset_policy = milestone_steps(config, milestones), evaluation_policy(policy, config)
        _check_same_evaluation(config.run_dir, targets, episodes, preset_policy)
        plans.append((name, config, targets, preset_policy))
    records = []
    for name, config, targets, preset_policy in plans:
        record = run_preset(name, config, targets, episodes, preset_policy, user_stop, log)
        if record is None:
            return None
        records.append(record)
    return report.write_report(out, records)
