"""The prefix-adder application as a podracer plugin: the `podracer.plugins` entry point
`prefix = experiments.prefix.plugin:register` (setup.cfg) registers, through the public
extension points and nothing else,

- the environment ids `PrefixAdder-<bits>[-w<weight>]` (JAX form and analytic host form)
  and `PrefixAdderSynth-<bits>[-w<weight>]` (host form, synthesis rewards), whose
  `env.params` are the environments' options (`experiments.prefix.env.prefix_options`);
- the torso "prefix_conv" (PrefixRL's Q-maps; options `blocks`, `channels`);
- the presets `dqn-prefix*` (`experiments.prefix.presets`);
- the commands `prefix-baseline`, `prefix-front` and `bench prefix`, and `SynthesisError`
  as a one-line failure (exit status 1: the tools ran and failed);
- a run-end hook that writes the Pareto front a run found into its directory;
- for DQN configs saved, and command lines written, while the prefix torso's options were
  DQNConfig fields: an upgrade of the saved section and the aliases
  `--agent.prefix-blocks`, `--agent.prefix-channels` (entries of `--agent.torso-options`).
"""

from __future__ import annotations

from typing import Any

from experiments.commands import BenchCommand, Command, register_bench_command, register_command, register_command_error
from experiments.overrides import register_option_alias
from experiments.prefix.commands import (
    BENCH_READS,
    add_baseline_arguments,
    add_bench_arguments,
    add_front_arguments,
    run_baseline_command,
    run_bench_command,
    run_front_command,
)
from experiments.prefix.env import PREFIX_BITS, make_prefix_env, prefix_options
from experiments.prefix.host_env import make_prefix_host_env, parse_host_id, prefix_host_specs, synthesis_record
from experiments.prefix.networks import PrefixConvOptions, make_prefix_conv
from experiments.prefix.presets import PREFIX_PRESETS, upgrade_dqn_section
from experiments.prefix.run_front import write_run_front
from experiments.prefix.synthesis import SynthesisError
from experiments.presets import register_preset
from experiments.run_end import register_run_end_hook
from podracer.config import register_config_upgrade
from podracer.envs import register_host_env_family, register_jax_env_family
from podracer.networks import register_torso

HOST_FAMILY = "prefix"  # the host backend name of the prefix-adder ids


def environment_record(env_id: str) -> dict[str, Any] | None:
    """What a prefix-adder run's rewards depend on beyond its config (`RUN_DIR/environment.json`):
    the synthesis toolchain, cell library and flow for synthesis rewards, else None."""
    record = synthesis_record(env_id)
    return None if record is None else {"synthesis": record}


def make_jax_prefix_env(env_id: str, params: tuple[str, ...]) -> Any:
    """The JAX form of a `PrefixAdder-` id with its `env.params` options.

    Args:
        env_id: `PrefixAdder-<bits>[-w<weight>]`.
        params: `name=value` options (`experiments.prefix.env.OPTIONS`).

    Returns:
        The environment, or None for an id not of that form.
    """
    return make_prefix_env(env_id, prefix_options(params, env_id, host=False) if params else None)


def register() -> None:
    """Register the application's environments, torso, presets, commands and hooks."""
    register_jax_env_family("PrefixAdder-<bits>[-w<weight>]", lambda env_id: env_id.startswith("PrefixAdder-"),
                            make_jax_prefix_env, examples=tuple(f"PrefixAdder-{bits}" for bits in PREFIX_BITS),
                            overwrite=True)
    register_host_env_family(
        HOST_FAMILY, lambda env_id: parse_host_id(env_id) is not None, make_prefix_host_env, prefix_host_specs,
        examples=tuple(f"PrefixAdder{kind}-{bits}" for kind in ("", "Synth") for bits in PREFIX_BITS),
        description="the prefix adders PrefixAdder-<N> (analytic costs) and PrefixAdderSynth-<N> (synthesis rewards)",
        record=environment_record, overwrite=True)
    register_torso("prefix_conv", PrefixConvOptions, make_prefix_conv, outputs="action_values",
                   description="PrefixRL's fully convolutional area and delay Q-maps, for the prefix-adder grid",
                   overwrite=True)
    for name, make in PREFIX_PRESETS.items():
        register_preset(name, make, overwrite=True)
    register_command(Command("prefix-baseline", add_baseline_arguments, run_baseline_command,
                             help="prefix adders: annealing, random or Pareto local search, and its Pareto front",
                             description="podracer prefix-baseline --bits 32 --method anneal --budget 500 --out DIR"),
                     overwrite=True)
    register_command(Command("prefix-front", add_front_arguments, run_front_command,
                             help="the Pareto front of a prefix-adder search or run",
                             description="podracer prefix-front DIR [--out FILE.png]", compiles=True),
                     overwrite=True)
    register_bench_command(BenchCommand(
        "prefix", add_bench_arguments, run_bench_command, reads=BENCH_READS,
        usage="podracer bench prefix --bits N --budget SYNTHESES --out DIR [--run-dir RUN] [overrides]"),
        overwrite=True)
    register_command_error(SynthesisError, status=1, describe=lambda error: f"synthesis failed: {error}")
    register_run_end_hook(write_run_front)
    register_config_upgrade("DQNConfig", upgrade_dqn_section)
    register_option_alias("agent.prefix_blocks", "agent.torso_options", "blocks")
    register_option_alias("agent.prefix_channels", "agent.torso_options", "channels")
