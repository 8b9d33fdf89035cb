"""Mutation check: does the test suite catch the bugs that matter?

`MUTATIONS` is a list of deliberate breaks of the library (issue #21): a GAE trace that leaks
across episode ends, a stale final observation, a learner that checkpoints NaN parameters, a
DQN target network updated every step, ... Each names the exact text it replaces and the
tests that must catch it. This script copies the repository (tracked and untracked, not
ignored files) to a scratch directory, checks that those tests pass there unchanged (the
baseline), then applies the mutations one at a time, runs their tests, restores the file,
and prints a table: `caught` (a test failed), `MISSED` (every test passed), `timeout` (a
test hit its time limit: inconclusive, rerun on an idle machine or with --stretch-timeouts).

    python tools/mutation_check.py                  # every mutation against its own tests
    python tools/mutation_check.py --list           # the mutations and their tests
    python tools/mutation_check.py --only gae-trace-not-cut,dqn-target-every-step
    python tools/mutation_check.py --full-suite     # each mutation against the whole suite (slow)
    python tools/mutation_check.py --stretch-timeouts 4   # a loaded machine: 4x every test's timeout

Exit status: 0 if every mutation was caught, 1 if any was missed or inconclusive (or the
baseline failed), 2 for bad arguments or a mutation whose text no longer occurs in the code
(`tests/support/test_helpers.py` checks that on every run of the suite, so the list cannot rot).
Not part of the pytest run: it runs pytest once per mutation (minutes each on 2 cores).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclasses.dataclass(frozen=True)
class Mutation:
    """A deliberate break: `edits` are `(path, old, new)`, each `old` occurring exactly once
    in its file; `tests` are pytest node ids (or files) that must fail once it is applied."""

    name: str
    what: str
    edits: tuple[tuple[str, str, str], ...]
    tests: tuple[str, ...]


M = Mutation
MUTATIONS: tuple[Mutation, ...] = (
    # --- the breaks listed in issue #21 -------------------------------------------------
    M("gae-trace-not-cut", "GAE's trace not cut at an episode end (leaks across truncations)",
      (("podracer/ops/returns.py", "gamma_lambda = jnp.where(end_t, 0.0, discount_t * lambda_)",
        "gamma_lambda = discount_t * lambda_"),),
      ("tests/ops/test_returns.py::TestGae",)),
    M("ppo-trace-ignores-truncation", "PPO cuts the GAE trace at terminations only",
      (("podracer/agents/ppo.py", "end = traj.terminated | traj.truncated", "end = traj.terminated"),),
      ("tests/integration/test_truncation.py::test_ppo_gae_update_uses_each_episode_alone",)),
    M("vtrace-trace-ignores-truncation", "V-trace (IMPALA, PPO-V-trace) cuts its trace at terminations only",
      (("podracer/agents/impala.py", "end = traj.terminated | traj.truncated", "end = traj.terminated"),),
      ("tests/integration/test_truncation.py::test_vtrace_updates_use_each_episode_alone",)),
    M("envpool-final-obs-stale", "EnvPool's final_obs one step stale at every episode end",
      (("podracer/envs/envpool_env.py",
        "        obs, info = self._pool.reset(self._ids)\n        return self._observation(obs, info[\"env_id\"])",
        "        obs, info = self._pool.reset(self._ids)\n"
        "        self._stale = self._observation(obs, info[\"env_id\"])\n        return self._stale"),
       ("podracer/envs/envpool_env.py",
        "        timestep = TimeStep(obs, reward, terminated, truncated, final_obs, episode_return, episode_length)",
        "        final_obs = np.where(done.reshape((-1,) + (1,) * (obs.ndim - 1)), self._stale, final_obs)\n"
        "        self._stale = obs\n"
        "        timestep = TimeStep(obs, reward, terminated, truncated, final_obs, episode_return, episode_length)")),
      ("tests/envs/test_host.py::test_cartpole_final_obs_is_where_each_episode_ended",
       "tests/envs/test_host.py::test_truncation_is_computed_from_elapsed_steps")),
    M("sebulba-next-obs-is-reset-obs", "the Sebulba actor stores the next episode's first observation as next_obs",
      (("sebulba/actor.py", '_write(buffers["next_obs"], t, ts.final_obs)', '_write(buffers["next_obs"], t, ts.obs)'),),
      ("tests/sebulba/test_actor.py",)),
    M("sebulba-ignores-nan-params", "the Sebulba learner ignores non-finite parameters (and checkpoints them)",
      (("sebulba/learner.py", 'check_finite(metrics, bool(finite), f"at update {update + 1}",',
        'check_finite(metrics, True, f"at update {update + 1}",'),),
      ("tests/sebulba/test_lifecycle.py::test_non_finite_parameters_on_a_checkpoint_step_keep_the_last_good_checkpoint",)),
    M("dqn-target-every-step", "DQN updates its target network every gradient step (target_update_period ignored)",
      (("podracer/agents/dqn.py", "due = steps.mod(config.target_update_period) == 0", "due = steps.ge(1)"),),
      ("tests/ops/test_qlearning.py::test_target_network_follows_a_counted_schedule",
       "tests/ops/test_qlearning.py::test_polyak_target_moves_only_when_due")),
    M("dqn-ignores-importance-weights", "DQN's loss ignores the prioritized-replay importance weights",
      (("podracer/agents/dqn.py", "loss = jnp.mean(weights * per_item)", "loss = jnp.mean(per_item)"),),
      ("tests/ops/test_qlearning.py::test_loss_weights_items_by_their_importance_weights",)),
    # --- more of the same kind ----------------------------------------------------------
    M("anakin-ignores-nan-params", "Anakin ignores non-finite parameters (a NaN on a checkpoint step)",
      (("anakin/runner.py", 'check_finite(metrics.agent, finite, f"in {call.label}",',
        'check_finite(metrics.agent, np.ones_like(finite), f"in {call.label}",'),),
      ("tests/experiments/test_train.py::test_non_finite_parameters_stop_the_run_and_keep_the_last_good_checkpoint",)),
    M("ppo-truncation-as-termination", "PPO does not bootstrap a truncated episode (treats it as terminated)",
      (("podracer/agents/ppo.py", "discount = config.gamma * (1.0 - traj.terminated.astype(jnp.float32))",
        "discount = config.gamma * (1.0 - (traj.terminated | traj.truncated).astype(jnp.float32))"),),
      ("tests/integration/test_truncation.py::test_ppo_values_ignore_the_time_limit",)),
    M("anakin-next-obs-is-reset-obs", "Anakin's rollout stores the next episode's first observation as next_obs",
      (("anakin/rollout.py", "truncated=ts.truncated, next_obs=ts.final_obs,",
        "truncated=ts.truncated, next_obs=ts.obs,"),),
      ("tests/integration/test_truncation.py::test_anakin_rollout_records_the_final_observation_at_a_time_limit",)),
    M("jax-env-final-obs-is-reset-obs", "JAX environments report the reset observation as final_obs",
      (("podracer/envs/base.py", "            final_obs=obs,\n", "            final_obs=next_obs,\n"),),
      ("tests/envs/test_jax_envs.py::test_time_limit_truncates_and_keeps_final_observation",
       "tests/integration/test_truncation.py::test_anakin_rollout_records_the_final_observation_at_a_time_limit")),
    M("sebulba-actor-resets-between-rollouts", "the Sebulba actor restarts its environments at every rollout",
      (("sebulba/actor.py", "state = rollout.state\n", "state = rollout.state._replace(obs=env.reset())\n"),),
      ("tests/sebulba/test_actor.py",)),
    M("recurrent-reset-one-step-late", "the learner's unroll resets the core after an episode's first step",
      (("anakin/rollout.py", "extras=extras, start=carry.start,", "extras=extras, start=done,"),),
      ("tests/agents/test_recurrent.py",)),
    M("sebulba-actor-core-reset-on-terminations-only", "the Sebulba actor keeps the core state across truncations",
      (("sebulba/actor.py", "start = step.timestep.terminated | step.timestep.truncated",
        "start = step.timestep.terminated"),),
      ("tests/sebulba/test_actor.py",)),
    M("anakin-rollout-never-resets-core", "Anakin's rollout never resets a recurrent core after the first step",
      (("anakin/rollout.py", "done if agent.recurrent else None",
        "jnp.zeros_like(done) if agent.recurrent else None"),),
      ("tests/agents/test_recurrent.py",)),
    M("recurrent-final-obs-after-reset", "the learner reads a truncated step's final observation from a reset core",
      (("podracer/agents/actor_critic.py", "flat[0], flat[1], jnp.zeros((T * B,), bool)",
        "flat[0], flat[1], jnp.ones((T * B,), bool)"),),
      ("tests/agents/test_recurrent.py",)),
    M("replay-mixing-drops-replay", "an update with replay learns from its fresh rollout only",
      (("podracer/replay/mixing.py", "inner, metrics = agent.update(state.replace(local=None), mixed, key)",
        "inner, metrics = agent.update(state.replace(local=None), traj, key)"),),
      ("tests/replay/test_mixing.py::test_each_update_learns_from_its_fresh_rollout_and_whole_replayed_sequences",)),
    M("replay-mixing-splices-restarted-streams", "replayed sequences run from a restarted environment's old stream "
      "into its new one",
      (("podracer/replay/mixing.py", "buffer.end_streams(state.local, ~stream_continues(buffer, state.local, "
        "traj.obs, B))", "state.local"),),
      ("tests/replay/test_mixing.py::test_replayed_sequences_end_where_the_environments_restarted",)),
    M("muzero-splices-restarted-streams", "MuZero's sampled sequences run from a restarted environment's old "
      "stream into its new one (targets and unrolls across the join)",
      (("podracer/agents/muzero/learning.py", "local = end_restarted_streams(network, state.params, replay, "
        "state.local, traj.obs[0], config.value_max)", "local = state.local"),),
      ("tests/agents/muzero/test_learning.py::test_replayed_sequences_end_where_the_environments_restarted",)),
    M("sequence-lookahead-samples-stashed-slots", "a wrapped sequence buffer samples the oldest steps whose "
      "observations the lookahead stash overwrote",
      (("podracer/replay/sequence.py", "return jnp.maximum(num_envs - (capacity - size(state)), 0) if lookahead "
        "else jnp.int32(0)", "return jnp.int32(0)"),),
      ("tests/replay/test_sequence.py::test_lookahead_stashes_each_next_observation_and_never_samples_the_steps_it_took",)),
    M("dqn-target-update-off-by-one", "DQN copies its target one gradient step early",
      (("podracer/agents/dqn.py", "due = steps.mod(config.target_update_period) == 0",
        "due = steps.add(1).mod(config.target_update_period) == 0"),),
      ("tests/ops/test_qlearning.py::test_target_network_follows_a_counted_schedule",)),
    M("ppo-value-clipping-ignored", "PPO's value clipping switched off whatever clip_value says",
      (("podracer/agents/ppo.py", "config.clip_eps if config.clip_value else None", "None"),),
      ("tests/agents/test_optimization.py::test_ppo_clips_its_value_around_the_learners_values_at_the_start_of_the_update",)),
    M("ppo-lr-schedule-too-short", "PPO's learning rate reaches 0 after num_updates SGD steps, not all of them",
      (("podracer/agents/ppo.py", "config.anneal_lr, num_updates * steps_per_update)",
        "config.anneal_lr, num_updates)"),),
      ("tests/agents/test_optimization.py::test_learning_rate_reaches_zero_after_every_sgd_step_of_the_run",)),
    M("impala-lr-not-annealed", "IMPALA's anneal_lr ignored (constant learning rate)",
      (("podracer/agents/impala.py", "lr = learning_rate(config.learning_rate, config.anneal_lr, num_steps)",
        "lr = learning_rate(config.learning_rate, False, num_steps)"),),
      ("tests/agents/test_optimization.py::test_learning_rate_decays_linearly_to_zero_over_the_run",)),
    M("checkpoint-restores-target-values", "restoring a checkpoint returns the target's values, not the saved ones",
      (("podracer/checkpoint.py", "return from_storable(restored.state, target), Progress",
        "return from_storable(stored_target, target), Progress"),),
      ("tests/core/test_checkpoint.py::test_round_trip_onto_mesh_shardings_and_keep_last",)),
    M("impala-cnn-one-residual-block", "the IMPALA CNN loses one residual block per stage",
      (("podracer/networks/torsos.py",
        "            x = _ResidualBlock(features)(x)\n            x = _ResidualBlock(features)(x)\n",
        "            x = _ResidualBlock(features)(x)\n"),),
      ("tests/networks/test_torsos.py::test_torso_shapes_and_parameter_count",)),
    M("evaluate-ignores-the-checkpoint", "evaluate plays an all-zero network instead of the checkpoint's",
      (("experiments/evaluate.py",
        "unfinished = episode_returns(env, loaded.policy, loaded.params, key_eval, episodes, max_steps)",
        "unfinished = episode_returns(env, loaded.policy, jax.tree.map(jnp.zeros_like, loaded.params), key_eval, "
        "episodes, max_steps)"),),
      ("tests/experiments/test_train_cli.py::test_evaluate_scores_the_checkpoints_policy",)),
    M("tree-comparison-ignores-structure", "the tests' tree comparison no longer checks the tree structure",
      (("tests/support/helpers.py", "    if actual_def != expected_def:\n", "    if False:\n"),),
      ("tests/support/test_helpers.py::test_differences_are_caught_and_named",)),
    M("wrapper-hides-render", "a JAX env wrapper (--env.observe) hides the environment's render from --video",
      (("podracer/envs/base.py", "    def __getattr__(self, name: str) -> Any:  # render, render_fps, ...: the "
        "environment's own\n        if name == \"env\":\n", "    def _getattr(self, name: str) -> Any:\n"
        "        if name == \"env\":\n"),),
      ("tests/envs/test_observe.py::test_observed_jax_env_still_renders_for_evaluation_videos",)),
    M("launcher-ignores-sigterm", "launch-local dies on SIGTERM and leaves its processes running",
      (("experiments/launch.py", "    with stop_on_signals() as stop:\n",
        "    with stop_on_signals(signums=(signal.SIGINT,)) as stop:\n"),),
      ("tests/experiments/test_launch.py::test_sigterm_to_the_launcher_stops_every_process",)),
    M("tensorboard-keeps-rows-after-checkpoint", "a resumed run's TensorBoard shows rows after its checkpoint twice",
      (("experiments/train.py", "purge_step = 0 if progress is None else progress.env_steps + 1",
        "purge_step = None"),),
      ("tests/runner/test_runner.py::test_tensorboard_of_a_resumed_run_shows_each_row_once",)),
    M("sebulba-stop-drops-last-updates", "a Sebulba stop between two log points leaves its last updates unlogged",
      (("sebulba/runner.py", "            reporter.flush()  # a resume from it starts logging after them\n",
        "            pass\n"),),
      ("tests/sebulba/test_lifecycle.py::test_stop_checkpoints_and_resume_continues_the_learner",
       "tests/sebulba/test_lifecycle.py::test_every_checkpoint_covers_only_logged_updates")),
    M("step-metrics-diluted", "a replay agent's loss averaged over updates that took no gradient step",
      (("podracer/runner/metrics.py", "if step_sums is not None and name in step_metrics and name in step_sums:",
        "if False:"),),
      ("tests/runner/test_runner.py::test_a_row_spanning_learning_starts_is_not_diluted",)),
    M("user-env-unchecked", "a user environment that breaks its own specs runs (or fails deep in the program)",
      (("podracer/envs/__init__.py", "        check_env_outputs(env, env_config.id)  #", "        pass  #"),),
      ("tests/envs/test_jax_envs.py::test_user_env_that_breaks_its_specs_is_a_config_error_at_setup",)),
    M("envpool-limit-hides-termination", "EnvPool ends episodes at our limit: a terminal last step reads truncated",
      (("podracer/envs/envpool_env.py", "{\"max_episode_steps\": min(time_limit(env_config) + 1, INT32_MAX)}",
        "{\"max_episode_steps\": min(time_limit(env_config), INT32_MAX)}"),),
      ("tests/envs/test_host.py::test_terminating_on_the_time_limit_step_is_termination",)),
    M("state-index-observations", "FrozenLake's state index reaches the network as a number, not one-hot",
      (("podracer/envs/host.py", "        return int(obs_space.n)\n    return None\n",
        "        pass\n    return None\n"),),
      ("tests/envs/test_host.py::test_state_index_observations_are_one_hot",)),
    M("resume-ignores-edited-config", "a resume continues with an edited config.json (another seed, learning rate)",
      (("experiments/run_dir.py", "    if saved is None:\n        return\n", "    if True:\n        return\n"),),
      ("tests/experiments/test_train.py::test_resume_refuses_an_edited_config_naming_the_field",)),
    M("cli-abbreviations", "an override such as --seed is taken for a command's option it abbreviates (--seeds)",
      (("experiments/cli_parser.py", 'kwargs.setdefault("allow_abbrev", False)',
        'kwargs.setdefault("allow_abbrev", True)'),),
      ("tests/experiments/test_cli.py::test_an_override_is_never_taken_for_an_option_it_abbreviates",)),
    M("damage-cause-not-read", "a chunk of a checkpoint removed (orbax wraps the error) is not called damage",
      (("podracer/checkpoint.py", "        error = error.__cause__\n", "        error = None\n"),),
      ("tests/core/test_checkpoint.py::test_a_damaged_latest_checkpoint_is_a_clear_error_naming_the_fallback",)),
    M("one-process-failure-untold", "a process failing on its own leaves the others waiting until their deadline",
      (("experiments/train.py", "            distributed.announce_failure(failure_line(error))\n",
        "            pass\n"),),
      ("tests/integration/test_multiprocess.py::test_a_checkpoint_shard_damaged_for_one_process_ends_every_process_at_once",)),
    M("failures-ignored", "a watchdog does not end its process when another process announces a failure",
      (("experiments/watchdog.py", "            if found is not None and not self._closed.is_set():",
        "            if False:"),),
      ("tests/experiments/test_watchdog.py::test_another_process_failing_ends_this_one_at_once_naming_its_error",)),
    M("resume-and-new-run-mixed", "one process resumes a run while another starts one (they meet at a deadline)",
      (("experiments/startup.py", "    check_same_session(values)\n", ""),),
      ("tests/integration/test_multiprocess.py::test_processes_that_disagree_fail_at_start_on_every_process",)),
    M("step-batch-skips-needed-resets", "a batch of environments resets only where every episode ended at once",
      (("podracer/envs/base.py", "    ended = jnp.any(timestep.terminated | timestep.truncated)\n",
        "    ended = jnp.all(timestep.terminated | timestep.truncated)\n"),),
      ("tests/envs/test_jax_envs.py::test_step_batch_is_the_vmapped_step",)),
    M("permutation-not-uniform", "an epoch's minibatches drawn from a biased permutation (keys of one random bit)",
      (("podracer/agents/minibatches.py", "    words = (jax.random.bits(key, (passes, size)) >> bits) << bits\n",
        "    words = (jax.random.bits(key, (passes, size)) >> 31) << bits\n"),),
      ("tests/agents/test_ppo.py::test_minibatches_are_uniformly_random_permutations",)),
    M("front-forgets-dominated-designs", "restarts draw from every graph kept, dominated ones too",
      (("experiments/prefix/host_env.py", "            self._front = front_designs(self._front + new)\n",
        "            self._front = self._front + new[:1]\n"),),
      ("tests/experiments/prefix/test_host_env.py::test_front_restarts_start_episodes_from_the_front_of_the_designs_costed",)),
    M("front-restarts-always-one-design", "restarts draw the front's first design every time, not a uniform one",
      (("experiments/prefix/host_env.py",
        "                graphs.append(self._front[self._rng.integers(len(self._front))].nodes)\n",
        "                graphs.append(self._front[0].nodes)\n"),),
      ("tests/experiments/prefix/test_host_env.py::test_a_restart_can_start_from_the_design_found_in_the_step_that_ended_the_episode",)),
    M("front-restarts-draw-when-off", "front_restarts=0 still draws a uniform per restart (streams change)",
      (("experiments/prefix/host_env.py",
        "            if self.front_restarts and self._front and self._rng.random() < self.front_restarts:\n",
        "            if self._rng.random() < self.front_restarts and self._front:\n"),),
      ("tests/experiments/prefix/test_host_env.py::test_without_front_restarts_the_episodes_start_as_they_always_did",)),
    M("cache-toolchain-unchecked", "a synthesis cache written with another toolchain or library is used",
      (("experiments/prefix/reward_pool.py", "    if record is not None and found != {} and found != dict(record):\n",
        "    if False:\n"),),
      ("tests/experiments/prefix/test_host_env.py::test_a_cache_written_with_another_toolchain_or_library_is_refused",)),
    M("yosys-names-never-freed", "a Yosys process keeps the names of every synthesis (grows without bound)",
      (("experiments/prefix/yosys_server.py",
        "        libyosys.request_garbage_collection()\n        libyosys.try_collect_garbage()\n", ""),),
      ("tests/experiments/prefix/test_host_env.py::test_a_yosys_process_does_not_grow_with_its_syntheses",)),
    M("run-record-unchecked", "a run trained under another synthesis toolchain resumes",
      (("experiments/run_dir.py", "    if saved != record:\n", "    if False:\n"),),
      ("tests/experiments/prefix/test_host_env.py::test_a_run_directory_records_the_synthesis_toolchain",)),
    M("local-search-from-the-start-only", "Pareto local search edits the classic adders only, never the front it found",
      (("experiments/prefix/search.py", "        front = front_designs(list(costs.designs.values()))\n",
        "        front = front_designs(list(costs.designs.values())[:4])\n"),),
      ("tests/experiments/prefix/test_search.py::test_pareto_local_search_edits_the_front_it_has_found",)),
    M("advantages-normalised-over-the-batch",
      "PPO standardises advantages with the statistics of the epoch, not each minibatch's",
      (("podracer/agents/ppo.py", "    axes = tuple(range(1, x.ndim))\n",
        "    axes = tuple(range(1, x.ndim))\n    return (x - jnp.mean(x)) / (jnp.std(x) + 1e-8)\n"),),
      ("tests/agents/test_ppo.py::test_ppo_losses_see_each_minibatch_standardised",
       "tests/core/test_parallel.py::test_minibatch_advantages_are_standardised_with_global_statistics")),
    M("reset-with-the-step-key", "an auto-reset draws its initial state from the key the step used",
      (("podracer/envs/base.py", "self.reset_env(jax.random.split(key)[1], params)",
        "self.reset_env(jax.random.split(key)[0], params)"),),
      ("tests/envs/test_jax_envs.py::test_gymnax_adapter_gives_gymnax_observations_and_rewards[CartPole-v1]",)),
)


def problems(mutation: Mutation, root: str = REPO) -> list[str]:
    """What stops `mutation` from applying to the code under `root`: an `old` text that does
    not occur exactly once, a test file or test function that does not exist."""
    found = []
    for path, old, _ in mutation.edits:
        full = os.path.join(root, path)
        if not os.path.isfile(full):
            found.append(f"{path}: no such file")
            continue
        count = _read(full).count(old)
        if count != 1:
            found.append(f"{path}: the text to replace occurs {count} times (expected once): {old!r}")
    for test in mutation.tests:
        path, _, node = test.partition("::")
        full = os.path.join(root, path)
        if not os.path.isfile(full):
            found.append(f"{test}: no such test file")
            continue
        name = node.split("::")[0].split("[")[0]
        source = _read(full)
        if name and not re.search(rf"^\s*(def|class) {re.escape(name)}\b", source, re.M):
            found.append(f"{test}: no {name} in {path}")
    return found


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def scratch_copy(destination: str) -> None:
    """The repository's tracked and untracked (not ignored) files, copied to `destination`."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, check=True,
                            capture_output=True).stdout.decode().split("\0")
    for path in filter(None, listed):
        source = os.path.join(REPO, path)
        if os.path.isfile(source):
            os.makedirs(os.path.dirname(os.path.join(destination, path)), exist_ok=True)
            shutil.copy2(source, os.path.join(destination, path))


def run_pytest(root: str, tests: list[str], env: dict[str, str], timeout_s: float) -> tuple[str, float, str]:
    """Run `tests` in `root`: `(outcome, seconds, detail)`, outcome `passed`, `failed`,
    `timeout` (a test hit its time limit) or `error` (nothing ran)."""
    command = [sys.executable, "-m", "pytest", "-n", "0", "-q", "-x", "-rf", "-p", "no:cacheprovider", *tests]
    start = time.perf_counter()
    try:
        proc = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return "timeout", time.perf_counter() - start, f"pytest ran past {timeout_s:.0f} s"
    seconds = time.perf_counter() - start
    output = proc.stdout + proc.stderr
    failed = re.findall(r"^FAILED (\S+)", output, re.M)
    detail = failed[0] if failed else output.strip().splitlines()[-1] if output.strip() else ""
    if proc.returncode == 0:
        return "passed", seconds, detail
    if "Timeout (>" in output:
        return "timeout", seconds, detail
    if proc.returncode in (1, 2) and (failed or "error" in output.lower()):
        return "failed", seconds, detail
    return "error", seconds, f"pytest exit {proc.returncode}: {detail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--list", action="store_true", help="list the mutations and their tests, run nothing")
    parser.add_argument("--only", default="", help="comma-separated mutation names to run")
    parser.add_argument("--full-suite", action="store_true", help="run the whole suite against each mutation")
    parser.add_argument("--no-baseline", action="store_true", help="skip checking the tests pass unmutated")
    parser.add_argument("--stretch-timeouts", type=int, default=1,
                        help="multiply every test's pytest-timeout by N (for a loaded machine)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per pytest run (default 1800)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch copy (its path is printed)")
    args = parser.parse_args(argv)

    selected = list(MUTATIONS)
    if args.only:
        names = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = sorted(set(names) - {m.name for m in MUTATIONS})
        if unknown:
            print(f"mutation_check: unknown mutation(s): {', '.join(unknown)} (see --list)", file=sys.stderr)
            return 2
        selected = [m for m in MUTATIONS if m.name in names]
    if args.list:
        for m in selected:
            print(f"{m.name}: {m.what}\n    breaks {', '.join(sorted({p for p, _, _ in m.edits}))}\n"
                  f"    caught by {' '.join(m.tests)}")
        return 0
    stale = {m.name: problems(m) for m in selected}
    if any(stale.values()):
        for name, found in stale.items():
            for problem in found:
                print(f"mutation_check: {name}: {problem}", file=sys.stderr)
        return 2

    scratch = tempfile.mkdtemp(prefix="podracer-mutants-")
    cache = tempfile.mkdtemp(prefix="podracer-mutants-jax-cache-")
    root = os.path.join(scratch, "repo")
    try:
        scratch_copy(root)
        env = {**os.environ, "PYTHONPATH": root, "JAX_COMPILATION_CACHE_DIR": cache}
        if args.stretch_timeouts > 1:  # tests/conftest.py stretches timeouts by this worker count
            env["PYTEST_XDIST_WORKER_COUNT"] = str(args.stretch_timeouts)
        where = subprocess.run([sys.executable, "-c", "import podracer.types as t; print(t.__file__)"], cwd=root,
                               env=env, capture_output=True, text=True, check=True).stdout.strip()
        if not where.startswith(root):
            print(f"mutation_check: the scratch copy imports podracer from {where}, not {root}", file=sys.stderr)
            return 2

        def tests_of(m: Mutation) -> list[str]:
            return [] if args.full_suite else list(m.tests)

        if not args.no_baseline:
            union = [] if args.full_suite else sorted({t for m in selected for t in m.tests})
            outcome, seconds, detail = run_pytest(root, union, env, args.timeout)
            print(f"baseline (no mutation): {outcome} in {seconds:.0f} s {detail}", flush=True)
            if outcome != "passed":
                print("mutation_check: the tests fail without any mutation; fix that first", file=sys.stderr)
                return 1

        rows = []
        for m in selected:
            originals: dict[str, str] = {}
            for path, old, new in m.edits:  # in order: several edits of one file build on each other
                current = _read(os.path.join(root, path))
                originals.setdefault(path, current)
                _write(os.path.join(root, path), current.replace(old, new, 1))
            try:
                outcome, seconds, detail = run_pytest(root, tests_of(m), env, args.timeout)
            finally:
                for path, text in originals.items():
                    _write(os.path.join(root, path), text)
            result = {"failed": "caught", "passed": "MISSED"}.get(outcome, outcome)
            rows.append((m.name, result, seconds, detail))
            print(f"{m.name}: {result} in {seconds:.0f} s {detail}", flush=True)
    finally:
        if args.keep:
            print(f"scratch copy kept in {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(cache, ignore_errors=True)

    width = max(len(name) for name, *_ in rows)
    print(f"\n{'mutation':<{width}}  result   seconds  first failing test")
    for name, result, seconds, detail in rows:
        print(f"{name:<{width}}  {result:<7}  {seconds:7.0f}  {detail}")
    caught = sum(result == "caught" for _, result, _, _ in rows)
    print(f"\n{caught} of {len(rows)} mutations caught")
    return 0 if caught == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
