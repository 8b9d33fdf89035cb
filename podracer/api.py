"""The Python API at the package's top (`podracer.train`, `resume`, `evaluate`, `plot`,
`presets`): the functions the `podracer` command itself runs, which live in the application
layer, `experiments/`.

The core never imports `experiments` when it is imported (the layers are podracer <- anakin |
sebulba <- experiments): each function here imports what it runs inside its body. That
`experiments` is podracer's own top-level package, installed beside `podracer/`, and a research
repository often has an `experiments/` folder of its own, which comes first on `sys.path` when
Python runs from that repository (`python -m`, `python -c`, a notebook). `use_own_experiments`
therefore loads the package from the directory beside podracer's, whatever `sys.path` holds.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import TYPE_CHECKING, Any, Callable, Sequence

if TYPE_CHECKING:
    from podracer.config import Config, DistributedConfig
    from podracer.runner import TrainResult

# the directory that holds `podracer/` and, beside it, `experiments/` (site-packages, or a checkout)
_HOME = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXPERIMENTS_DIR = os.path.join(_HOME, "experiments")


def use_own_experiments() -> None:
    """Make `experiments` (in `sys.modules`) podracer's own package, the one beside `podracer/`.

    Loaded from its directory, not found on `sys.path`: a user's folder named `experiments`
    in the current directory would come first there.

    Raises:
        ImportError: another module named `experiments` is already imported, or podracer's own
            is missing (an incomplete installation).
    """
    init = os.path.join(EXPERIMENTS_DIR, "__init__.py")
    loaded = sys.modules.get("experiments")
    if loaded is not None:
        where = getattr(loaded, "__file__", None) or list(getattr(loaded, "__path__", []))
        if not isinstance(where, str) or os.path.realpath(where) != os.path.realpath(init):
            raise ImportError(f"podracer needs its own 'experiments' package ({EXPERIMENTS_DIR}), but another module "
                              f"named 'experiments' is already imported (from {where}); rename yours, or leave it "
                              "unimported where podracer runs")
        return
    if not os.path.isfile(init):
        raise ImportError(f"podracer's 'experiments' package is missing ({EXPERIMENTS_DIR}); reinstall podracer")
    spec = importlib.util.spec_from_file_location("experiments", init, submodule_search_locations=[EXPERIMENTS_DIR])
    module = importlib.util.module_from_spec(spec)
    sys.modules["experiments"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules["experiments"]
        raise


def train(
    config: Config,
    name: str = "run",
    console: bool | None = None,
    on_metrics: Callable[[dict[str, Any]], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> TrainResult:
    """Train as `podracer train` does.

    Args:
        config: the run's complete config (`podracer.presets.get(...)`, or built by hand).
        name: the run directory's prefix when `config.run_dir` is empty (`runs/<name>-<time>`).
        console: shows the progress bar; None keeps `config.log.console` (notebooks may
            prefer False).
        on_metrics: called with each metrics row as it is written to `metrics.jsonl`.
        should_stop: polled between host calls; when it returns True the run checkpoints
            and returns with `stopped=True` (`resume(run_dir)` continues it).

    Returns:
        The run's `TrainResult`: its metrics rows, final state, agent and run directory.

    Raises:
        ConfigError: a bad config, or a run directory that holds another run's checkpoints.
    """
    use_own_experiments()
    from experiments.train import train as run

    return run(config, name=name, console=console, on_metrics=on_metrics, should_stop=should_stop)


def resume(
    run_dir: str,
    console: bool | None = None,
    on_metrics: Callable[[dict[str, Any]], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    distributed_config: DistributedConfig | None = None,
) -> TrainResult:
    """Continue the run in `run_dir` from its latest checkpoint, with its saved config.

    Args:
        run_dir: the directory `train` wrote.
        console: shows the progress bar; None keeps the saved `log.console`.
        on_metrics: called with each metrics row as it is written to `metrics.jsonl`.
        should_stop: polled between host calls, as in `train`.
        distributed_config: this session's processes (default: one process); the saved
            config's `distributed` section describes the session that wrote it.

    Returns:
        The run's `TrainResult`; `metrics.jsonl` continues where the checkpoint left it.

    Raises:
        ConfigError: there is no checkpoint, or it does not match the saved config.
    """
    use_own_experiments()
    from experiments.train import resume as run

    return run(run_dir, console=console, on_metrics=on_metrics, should_stop=should_stop,
               distributed_config=distributed_config)


def evaluate(
    run_dir: str,
    episodes: int = 100,
    seed: int = 0,
    agent_seed: int = 0,
    sample: bool = False,
    video: str | None = None,
    max_steps: int | None = None,
    step: int | None = None,
) -> dict[str, Any]:
    """Evaluate a run's policy (greedy unless `sample`) on fresh episodes, as `podracer evaluate` does.

    Args:
        run_dir: the directory `train` wrote.
        episodes: how many episodes.
        seed: the environments' seed.
        agent_seed: which seed of a run of several (`arch.num_seeds`).
        sample: sample actions from the policy instead of taking the greedy action.
        video: a file (`.gif`, `.mp4`) to record the first episode into.
        max_steps: the steps an episode may last; None takes the evaluator's default (100,000).
        step: the checkpoint of this update (one the run kept) instead of the latest.

    Returns:
        `{"mean_return", "std_return", "episodes", "unfinished", "step", ...}`.

    Raises:
        ConfigError: a bad argument, or no checkpoint to evaluate.
    """
    use_own_experiments()
    from experiments.evaluate import DEFAULT_MAX_STEPS
    from experiments.evaluate import evaluate as run

    return run(run_dir, episodes=episodes, seed=seed, agent_seed=agent_seed, sample=sample, video=video,
               max_steps=DEFAULT_MAX_STEPS if max_steps is None else max_steps, step=step)


def plot(
    run_dirs: str | os.PathLike | Sequence[str | os.PathLike],
    labels: Sequence[str] | None = None,
    spread: str = "stderr",
    smooth: int = 1,
    title: str | None = None,
) -> Any:
    """The runs' learning curves, drawn without pyplot (no global matplotlib state changes).

    Args:
        run_dirs: one run directory or several; runs with the same label are averaged.
        labels: one label per run (default: from the run directories' names).
        spread: the shaded band, "stderr" (standard error over seeds and runs) or "minmax".
        smooth: a moving average over this many rows.
        title: the figure's title.

    Returns:
        A matplotlib `Figure`: return against env steps and against wall time.
    """
    use_own_experiments()
    from experiments.plot import plot_figure

    return plot_figure(run_dirs, labels=labels, spread=spread, smooth=smooth, title=title)


class Presets:
    """The named experiment presets (`podracer.presets`), as the `podracer` command has them."""

    def names(self) -> list[str]:
        """Every preset's name.

        Returns:
            The names, the default example (`ppo-cartpole-anakin`) first.
        """
        return self._module().names()

    def get(self, name: str, **changes: Any) -> Config:
        """A preset's config with fields replaced, validated as the command line validates them.

        Args:
            name: the preset's name (`names()`).
            **changes: top-level fields (`seed=3`) and sections as dicts of their fields
                (`agent=dict(learning_rate=1e-3)`).

        Returns:
            The complete `Config`.

        Raises:
            ConfigError: an unknown preset or field, or a bad value, named.
        """
        return self._module().get(name, **changes)

    def register(self, name: str, make: Callable[[], Config], overwrite: bool = False) -> None:
        """Add a preset of your own; the `podracer` command sees it when the module that
        registers it is named in `$PODRACER_IMPORT`, or is a `podracer.plugins` entry point.

        Args:
            name: a word that does not start with '-' and is not a built-in preset's name.
            make: returns the preset's complete `Config`.
            overwrite: replace a preset of that name that you registered before.
        """
        self._module().register_preset(name, make, overwrite=overwrite)

    @staticmethod
    def _module() -> Any:
        use_own_experiments()
        from experiments import presets

        return presets


presets = Presets()
