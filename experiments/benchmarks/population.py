"""Throughput of a population in one program against the same runs one after another.

    python -m experiments.benchmarks.population [--settings 16] [--seeds 4] [--updates 128] [--sequential 2]

PPO on CartPole (`ppo-cartpole-anakin`): `settings` learning rates (log-spaced over
[1e-4, 3e-3]) times `seeds` seeds as one population (`--sweep`), against single runs of
one setting and one seed, `sequential` of them timed (each compiles its own program: a
learning rate is a constant of a run's program) and extrapolated to all of them. Prints
one JSON object: compile (setup to first update) and total times, env steps/s of every
member together, and the speed-up.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from typing import Any

import jax
import numpy as np

import anakin
from experiments.presets import PRESETS
from podracer.config import Config, LogConfig, PopulationConfig


def timed_run(config: Config) -> dict[str, Any]:
    """Train `config`; its wall time, compile time (everything before the first update's
    clock starts) and env steps of every member."""
    start = time.perf_counter()
    result = anakin.train(config)
    total = time.perf_counter() - start
    train_s = result.metrics[-1]["wall_s"]
    members = np.asarray(jax.tree.leaves(result.state.agent.params)[0]).shape[0]
    steps = result.metrics[-1]["env_steps"] * members
    return {"members": members, "env_steps": steps, "total_s": total, "compile_s": total - train_s,
            "train_s": train_s, "sps_total": steps / total, "sps_training": steps / train_s}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--settings", type=int, default=16)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--updates", type=int, default=128, help="updates per member")
    parser.add_argument("--sequential", type=int, default=2, help="single runs timed")
    args = parser.parse_args(argv)
    preset = PRESETS["ppo-cartpole-anakin"]()
    steps = args.updates * preset.arch.num_envs * preset.arch.rollout_length
    base = dataclasses.replace(preset, total_env_steps=steps, log=LogConfig(console=False, tensorboard=False))
    rates = np.geomspace(1e-4, 3e-3, args.settings)
    sweep = "agent.learning_rate=" + ",".join(f"{r:.3g}" for r in rates)
    population = timed_run(dataclasses.replace(
        base, arch=dataclasses.replace(base.arch, num_seeds=args.seeds), population=PopulationConfig(sweep=(sweep,))))
    singles = [timed_run(dataclasses.replace(base, agent=dataclasses.replace(base.agent, learning_rate=float(r))))
               for r in rates[:args.sequential]]
    runs = args.settings * args.seeds
    sequential_s = runs * float(np.mean([s["total_s"] for s in singles]))
    out = {
        "device": str(jax.devices()[0].device_kind), "local_devices": jax.local_device_count(),
        "members": runs, "env_steps_per_member": steps, "population": population, "single_runs": singles,
        "sequential_total_s_extrapolated": sequential_s,
        "sequential_sps_total": runs * steps / sequential_s,
        "speedup_total": sequential_s / population["total_s"],
    }
    print(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
