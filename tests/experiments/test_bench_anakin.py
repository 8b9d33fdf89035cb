"""`podracer bench anakin` (experiments/bench.py): its figures are consistent with each
other and with the hand-written reference it runs beside podracer. No speed is asserted:
speed is measured by benchmarks, never by tests."""

import jax
import pytest

from experiments.bench import bench_anakin
from experiments.cli import resolve_config
from podracer.config import ConfigError

# ppo-cartpole-anakin made small: 2 updates of 4 envs x 8 steps per call, on one device.
SMALL = ["--arch.devices", "0", "--arch.num-envs", "4", "--arch.rollout-length", "8", "--arch.updates-per-call", "2",
         "--agent.num-minibatches", "2", "--agent.hidden-sizes", "16", "--total-env-steps", "640"]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_compare_reference_times_both_programs_and_says_whether_the_cache_was_on():
    """`--compare-reference`: both programs compiled and timed on the same calls, `speedup`
    is podracer's env steps/s over the reference's, and `compilation_cache` says whether
    compile_s may be a load from JAX's persistent cache."""
    result = bench_anakin(resolve_config("ppo-cartpole-anakin", SMALL), repeats=1, compare_reference=True)
    assert result["env"] == "CartPole-v1" and result["devices"] == 1 and result["num_envs"] == 4
    assert result["sps"] > 0 and result["limit_sps"] > 0 and result["reference_sps"] > 0
    assert result["speedup"] == pytest.approx(result["sps"] / result["reference_sps"], abs=2e-3)
    assert result["ratio"] == pytest.approx(result["sps"] / result["limit_sps"], abs=2e-4)
    assert result["compile_s"] > 0 and result["reference_compile_s"] > 0
    assert result["compilation_cache"] is bool(jax.config.jax_compilation_cache_dir)


@pytest.mark.parametrize("overrides, message", [
    (["--agent.advantage", "vtrace"], "the reference is PPO with GAE and separate MLP actor and critic"),
    (["--agent.shared-torso", "true"], "the reference is PPO with GAE and separate MLP actor and critic"),
    (["--arch.devices", "0,1"], "the reference runs a gymnax environment on one device"),
])
def test_compare_reference_refuses_what_the_reference_cannot_run_before_compiling(overrides, message, monkeypatch):
    """A preset the reference cannot run is one ConfigError naming why, before podracer's
    own program is set up and compiled."""
    from anakin import runner

    monkeypatch.setattr(runner, "setup", lambda config: pytest.fail("set up before the check"))
    config = resolve_config("ppo-cartpole-anakin", [*SMALL, *overrides])
    with pytest.raises(ConfigError, match=message):
        bench_anakin(config, repeats=1, compare_reference=True)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_replay_agent_is_timed_only_after_learning_starts(monkeypatch):
    """DQN takes no gradient step for its first `learning_starts` env steps: the timed calls
    come after them (untimed warm-up calls pass them), so `sps` is training, not acting."""
    from experiments import bench

    per_call = 2 * 4 * 8  # updates per call x envs x steps: env steps per call
    config = resolve_config("dqn-cartpole-anakin", [
        "--arch.devices", "0", "--arch.num-envs", "4", "--arch.rollout-length", "8", "--arch.updates-per-call", "2",
        "--agent.hidden-sizes", "16", "--agent.learning-starts", str(3 * per_call - 10), "--agent.batch-size", "8",
        "--agent.buffer-size", "512", "--total-env-steps", "20000"])
    assert bench.warmup_calls(config, per_call) == 3
    gradient_steps = []
    real_timed_calls = bench._timed_calls

    def recording(call, state, n, repeats, warmup=1):
        def call_and_record(state, n):
            state, out = call(state, n)
            if hasattr(out, "agent"):  # a training call (the acting-only limit is timed too)
                gradient_steps.append(float(out.agent["gradient_steps"].sum()))
            return state, out
        return real_timed_calls(call_and_record, state, n, repeats, warmup)

    monkeypatch.setattr(bench, "_timed_calls", recording)
    result = bench.bench_anakin(config, repeats=2)
    assert result["warmup_calls"] == 3 and len(gradient_steps) == 5
    assert gradient_steps[0] == 0 and all(steps > 0 for steps in gradient_steps[3:]), gradient_steps
