"""`arch.layout="auto"`: the choice as a pure function of made-up rates (a fake environment
whose batch rate follows a formula, fake inference timings), the config field, and the
whole path on CPU: setup measures, the run records `layout.json`, `bench sebulba --json`
reports the limits."""

import dataclasses
import json

import pytest

from podracer.config import ConfigError
from sebulba.config import SebulbaConfig
from sebulba.layout_choice import (
    TIE,
    Budgets,
    Measurements,
    candidate_env_threads,
    candidate_splits,
    choose_layout,
    predict,
    shortlist,
)
from tests.support.helpers import run_main

STEP_BYTES = 2 * 4 * 84 * 84  # Atari: observation and next one, 4 stacked 84 x 84 frames


def fake_measurements(num_envs: int, cores: int, env_step_s: float, infer_call_s: float, infer_env_s: float,
                      shared_cores: bool = False, devices: int = 1, learners: int = 1) -> Measurements:
    """Rates of a fake environment and policy at every candidate: one env step costs
    `env_step_s` of one core (EnvPool's threads split a batch, up to the cores); one
    inference costs `infer_call_s` plus `infer_env_s` per env."""
    env_rate, inference_rate = {}, {}
    for threads, b in candidate_splits(num_envs, devices, learners, cores):
        for e in candidate_env_threads(b, devices * threads, cores):
            env_rate[(b, e)] = b / (b * env_step_s / min(e, b, cores))
        inference_rate[b] = b / (infer_call_s + b * infer_env_s)
    return Measurements(env_rate, inference_rate, cores, shared_cores)


def choose(m: Measurements, num_envs: int, devices: int = 1, learners: int = 1, budgets: Budgets = Budgets(), **kw):
    return choose_layout(m, num_envs, devices, learners, rollout_length=128, step_bytes=STEP_BYTES,
                         budgets=budgets, **kw)


@pytest.mark.parametrize("cores", [2, 8, 32])
def test_environment_bound_uses_every_core(cores):
    """Atari-like: env steps are slow (1 ms of a core), inference on an accelerator is cheap:
    the choice keeps every core stepping environments and overlaps inference (two or more
    batches per device), and predicts close to the cores' env rate."""
    m = fake_measurements(128, cores, env_step_s=1e-3, infer_call_s=2e-4, infer_env_s=1e-6)
    choice = choose(m, 128)
    assert choice.bound == "environments"
    assert choice.threads_per_actor_device >= 2
    assert choice.threads_per_actor_device * choice.env_threads >= cores  # no core left idle
    assert choice.threads_per_actor_device * choice.envs_per_thread == 128  # num_envs is the user's
    cores_rate = cores / 1e-3
    assert choice.predicted_sps >= 0.8 * cores_rate
    assert choice.reason.startswith("layout auto: ") and "environments" in choice.reason


@pytest.mark.parametrize("cores", [2, 16])
def test_inference_bound_keeps_large_batches(cores):
    """A heavy policy with a large per-call cost (a big network on a slow device) and cheap
    environments: more threads mean smaller batches, each paying the call again, so the
    choice keeps the batches large."""
    m = fake_measurements(64, cores, env_step_s=1e-6, infer_call_s=5e-3, infer_env_s=1e-5)
    choice = choose(m, 64)
    assert choice.bound == "inference"
    assert choice.predicted_sps >= (1 - TIE) * max(c.predicted_sps for c in choice.candidates)  # ties: 2+ threads
    assert choice.threads_per_actor_device <= 2  # 32+ envs per call: the call cost amortised
    assert choice.envs_per_thread >= 32


def test_shared_cpu_cores_add_up():
    """On a CPU actor device the policy takes the same cores as the environments: the
    prediction is the harmonic combination, never more than either alone."""
    kw = dict(b=8, threads=2, env_threads=1, devices=1, env_rate=1000.0, inference_rate=1000.0, cores=2)
    shared, env_cap, inference_cap = predict(**kw, shared_cores=True)
    apart, _, _ = predict(**kw, shared_cores=False)
    assert shared == pytest.approx(1 / (1 / env_cap + 1 / inference_cap))
    assert shared < apart <= min(env_cap, inference_cap)


def test_oversubscribed_cores_do_not_help():
    """More EnvPool threads than cores never predicts a faster environment."""
    fast, _, _ = predict(8, 2, 1, 1, 1000.0, 1e9, cores=2, shared_cores=False)
    over, _, _ = predict(8, 2, 4, 1, 1000.0, 1e9, cores=2, shared_cores=False)
    assert over < fast


def test_splits_respect_devices_and_learners():
    """Every split divides num_envs over the actor devices and gives each thread a batch the
    learner devices divide; never more threads per device than cores."""
    for threads, b in candidate_splits(96, 2, 3, cores=16):
        assert threads * b * 2 == 96 and b % 3 == 0 and threads <= 16
    assert candidate_splits(12, 1, 1, cores=2) == [(1, 12), (2, 6)]


def test_the_policy_lag_budget_rules_out_long_rollouts():
    """A rollout slower than `max_rollout_s` (actors acting too long on the same
    parameters) is out; with every candidate out, a ConfigError naming arch.num_envs."""
    m = fake_measurements(64, 4, env_step_s=1e-3, infer_call_s=1e-3, infer_env_s=1e-5)
    free = choose(m, 64)
    tight = Budgets(max_rollout_s=min(c.rollout_s for c in free.candidates) * 1.01)
    chosen = choose(m, 64, budgets=tight)
    kept = [c for c in chosen.candidates if c.within_budgets]
    assert kept and all(c.rollout_s <= tight.max_rollout_s for c in kept)
    assert any(not c.within_budgets for c in chosen.candidates)
    assert chosen.predicted_sps <= free.predicted_sps
    with pytest.raises(ConfigError, match="arch.num_envs"):
        choose(m, 64, budgets=Budgets(max_rollout_s=1e-6))


def test_the_memory_budget():
    """Trajectories in flight above `memory_bytes`: no layout fits (num_envs is too large)."""
    m = fake_measurements(256, 8, env_step_s=1e-3, infer_call_s=1e-4, infer_env_s=1e-6)
    needed = 3 * 256 * 128 * STEP_BYTES  # (queue 1 + building + learning) x envs x steps x bytes
    assert all(c.memory_bytes == needed for c in choose(m, 256).candidates)
    with pytest.raises(ConfigError, match="arch.num_envs: no actor layout fits"):
        choose(m, 256, budgets=Budgets(memory_bytes=needed - 1))


def test_tried_layouts_decide():
    """Once layouts were tried whole, the best tried one is chosen, whatever the prediction
    of the others (it misses the threads' contention); the config's own layout is tried too."""
    m = fake_measurements(12, 2, env_step_s=1e-5, infer_call_s=5e-5, infer_env_s=1e-6, shared_cores=True)
    predicted = choose(m, 12, manual=(1, 0))
    tried = shortlist(predicted, manual=(1, 0))
    assert (1, 0) in tried and len(tried) <= 3
    rates = {layout: 1000.0 for layout in tried}
    rates[(1, 0)] = 5000.0  # the config's own layout runs fastest
    chosen = choose(dataclasses.replace(m, trial_rate=rates), 12, manual=(1, 0))
    assert (chosen.threads_per_actor_device, chosen.env_threads) == (1, 0)
    assert chosen.predicted_sps == 5000.0 and "Tried whole" in chosen.reason
    other = next(layout for layout in tried if layout != (1, 0))
    rates = {layout: 1000.0 for layout in tried} | {other: 1090.0}  # within KEEP_OWN of the config's own
    chosen = choose(dataclasses.replace(m, trial_rate=rates), 12, manual=(1, 0))
    assert (chosen.threads_per_actor_device, chosen.env_threads) == (1, 0)  # noise is no reason to change
    rates[other] = 2000.0
    chosen = choose(dataclasses.replace(m, trial_rate=rates), 12, manual=(1, 0))
    assert (chosen.threads_per_actor_device, chosen.env_threads) == other


def test_the_config_field_is_validated():
    assert SebulbaConfig().layout == "manual"
    assert SebulbaConfig(layout="auto").layout == "auto"
    with pytest.raises(ConfigError, match="arch.layout must be one of manual, auto, got 'fast'"):
        SebulbaConfig(layout="fast")


def _auto_cartpole(tmp_path=None):
    from experiments.presets import PRESETS

    config = PRESETS["ppo-cartpole-sebulba"]()
    arch = dataclasses.replace(config.arch, layout="auto", actor_devices=(0,), learner_devices=(1,), num_envs=8,
                               rollout_length=16, updates_per_log=1)
    return dataclasses.replace(config, arch=arch, total_env_steps=8 * 16 * 3,
                               run_dir=str(tmp_path / "run") if tmp_path else "")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_auto_layout_end_to_end(tmp_path, capsys):
    """`train` with layout auto on CPU: setup measures and chooses, the run trains with it,
    writes layout.json (the resolved sizes and the rates) and prints why; the config written
    to the run directory is the user's (the derived sizes are not written back)."""
    from experiments.train import train

    config = _auto_cartpole(tmp_path)
    result = train(config, console=True)
    assert result.env_steps == 8 * 16 * 3
    record = json.loads((tmp_path / "run" / "layout.json").read_text())
    assert record["num_actor_threads"] * record["envs_per_thread"] == 8
    assert record["reason"].startswith("layout auto: ") and record["candidates"] and record["env_rate"]
    saved = json.loads((tmp_path / "run" / "config.json").read_text())["arch"]
    assert saved["layout"] == "auto" and saved["threads_per_actor_device"] == 1 and saved["env_threads"] == 0
    assert "layout auto: " in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_bench_sebulba_json_keys(monkeypatch, capsys):
    """`bench sebulba --json` reports the limits and the diagnosis; with layout auto, the
    config's own layout measured beside it. Shortened: one round of a fraction of a second."""
    from sebulba import benchmark

    monkeypatch.setattr(benchmark, "WARMUP_S", 0.1)
    code, out = run_main(capsys, "bench", "sebulba", "--json", "--seconds", "0.6", "--arch.layout", "auto",
                         "--arch.num-envs", "6", "--arch.rollout-length", "16", "--arch.actor-devices", "0",
                         "--arch.learner-devices", "1")
    assert code == 0, out.err
    result = json.loads(out.out.strip().splitlines()[-1])
    for key in ("limit_sps", "actor_sps", "sps", "env_limit_sps", "inference_limit_sps", "learner_limit_sps",
                "manual_actor_sps", "auto_over_manual", "diagnosis", "layout"):
        assert key in result, key
    assert result["env_limit_sps"] > 0 and result["inference_limit_sps"] > 0 and result["learner_limit_sps"] > 0
    assert result["diagnosis"].startswith("actors bound by ")


def test_diagnosis_line():
    from sebulba.benchmark import diagnose

    line = diagnose({"actor_sps": 940.0, "env_limit_sps": 1000.0, "inference_limit_sps": 5000.0,
                     "learner_limit_sps": 800.0, "sps": 780.0})
    assert line.startswith("actors bound by the environments: 94% of EnvPool's own rate")
    assert "training bound by the learner" in line
    line = diagnose({"actor_sps": 450.0, "env_limit_sps": 1000.0, "inference_limit_sps": 500.0,
                     "learner_limit_sps": 9000.0, "sps": 440.0})
    assert line.startswith("actors bound by inference: 90% of the policy's own rate")
