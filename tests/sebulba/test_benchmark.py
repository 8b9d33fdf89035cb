"""`podracer bench sebulba`'s measurement window starts after compilation."""

import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

from sebulba.benchmark import _measure
from sebulba.threads import ThreadGroup


def _counting_after(delay_s: float, counts: np.ndarray, stop: threading.Event) -> None:
    """A stand-in actor whose first step comes after `delay_s` (a slow compile)."""
    time.sleep(delay_s)
    while not stop.is_set():
        counts[0] += 1
        time.sleep(0.001)


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_measurement_waits_for_the_first_steps():
    """With a compile longer than the fixed warm-up, the window used to see no steps at
    all (a 0 limit_sps and a division by zero in `bench`)."""
    counts = np.zeros(1, np.int64)
    group = ThreadGroup()
    group.start("slow-compile", _counting_after, 2.5, counts, group.stop)
    sps, _ = _measure(group, counts, seconds=0.5)
    assert sps > 100


def test_training_sps_is_timed_past_learning_starts(monkeypatch):
    """A replay agent acts without learning for its first `learning_starts` env steps, much
    faster than it trains: `sps` is measured from the first row past them."""
    from experiments.presets import PRESETS
    from sebulba import benchmark

    config = PRESETS["dqn-cartpole-sebulba"]()
    starts = config.agent.learning_starts
    # Acting alone at 10k env steps/s up to learning_starts, then training at 1k/s.
    steps = [starts // 4, starts // 2, starts, starts + 1000, starts + 2000, starts + 3000]
    walls = [step / 10_000 if step <= starts else starts / 10_000 + (step - starts) / 1000 for step in steps]

    def fake_run(config, s, state, hooks):
        rows = [{"env_steps": step, "wall_s": wall} for step, wall in zip(steps, walls)]
        for row in rows:
            hooks.on_metrics(row)
        return rows, None

    monkeypatch.setattr(benchmark, "setup", lambda config, chosen=None: None)
    monkeypatch.setattr(benchmark, "initial_learner_state", lambda config, s: None)
    monkeypatch.setattr(benchmark, "run", fake_run)
    manual = SimpleNamespace(layout=SimpleNamespace(auto=None))  # the Setup of a manual layout
    assert benchmark.training_sps(config, manual, seconds=1.0) == pytest.approx(1000.0)
