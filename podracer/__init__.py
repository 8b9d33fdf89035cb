"""podracer: reinforcement learning at scale in JAX (Anakin and Sebulba).

The top level is the Python API that the `podracer` command itself runs on:

    import podracer
    config = podracer.presets.get("ppo-cartpole-anakin", agent=dict(learning_rate=1e-3))
    result = podracer.train(config)              # writes a run directory; TrainResult
    podracer.resume(result.run_dir)              # continue an interrupted run
    podracer.evaluate(result.run_dir)            # {"mean_return": ..., ...}
    figure = podracer.plot([result.run_dir])     # a matplotlib Figure

and the library's modules that a user builds on: `agents`, `config`, `envs`, `networks`,
`ops`, `parallel`, `replay`, `runner`, `types`. Importing it loads JAX but starts no JAX
backend and imports nothing from the runners or `experiments/` (podracer.api says how the
functions above reach the application layer).
"""

from podracer import agents, config, envs, networks, ops, parallel, replay, runner, types
from podracer.api import evaluate, plot, presets, resume, train

__version__ = "0.3.0"

__all__ = [
    # the Python API of the `podracer` command
    "evaluate",
    "plot",
    "presets",
    "resume",
    "train",
    # the library's modules
    "agents",
    "config",
    "envs",
    "networks",
    "ops",
    "parallel",
    "replay",
    "runner",
    "types",
]
