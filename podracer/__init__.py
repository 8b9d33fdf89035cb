"""podracer: reinforcement learning at scale in JAX (Anakin and Sebulba).

The top level is the Python API that the `podracer` command itself runs on:

    import podracer
    config = podracer.presets.get("ppo-cartpole-anakin", agent=dict(learning_rate=1e-3))
    result = podracer.train(config)              # writes a run directory; TrainResult
    podracer.resume(result.run_dir)              # continue an interrupted run
    podracer.evaluate(result.run_dir)            # {"mean_return": ..., ...}
    figure = podracer.plot([result.run_dir])     # a matplotlib Figure

These names, and the library's modules (`podracer.agents`, `podracer.config`, `podracer.envs`,
...), are loaded on first use, so `import podracer` stays light and the library's layers
(podracer -> anakin / sebulba -> experiments) keep their direction at import time.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

__version__ = "0.3.0"

_API = {
    "presets": ("experiments.presets", None),
    "train": ("experiments.train", "train"),
    "resume": ("experiments.train", "resume"),
    "evaluate": ("experiments.evaluate", "evaluate"),
    "plot": ("experiments.plot", "plot_figure"),
}

__all__ = sorted(_API)


def __getattr__(name: str) -> Any:
    if name not in _API:
        # the library's own modules (`podracer.agents`, `podracer.config`, ...), imported on first use
        if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
            return importlib.import_module(f"{__name__}.{name}")
        raise AttributeError(f"module 'podracer' has no attribute {name!r}")
    module_name, attribute = _API[name]
    module = importlib.import_module(module_name)
    return module if attribute is None else getattr(module, attribute)


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_API))
