"""Prefix-adder design (PrefixRL, Roy et al., DAC 2021) as a podracer application: a plugin
(`plugin.register`, the `podracer.plugins` entry point `prefix`) that registers its
environments, torso, presets, commands and run-end hook through podracer's extension points;
nothing outside this package imports it.

- `graph`: prefix graphs on the N x N grid, legalisation, levels, fanout, actions (NumPy);
- `builders`: ripple, Sklansky, Kogge-Stone, Brent-Kung;
- `netlist`: the adder as gates, Verilog and BLIF, and a simulator that checks it adds;
- `jax_graph` and `env`: the same dynamics in JAX, the Anakin environment `PrefixAdder-<N>`;
- `synthesis`, `reward_pool`, `cost_pools`, `host_env`: rewards from Yosys/ABC through a pool
  of reward workers, pools by cost model, and the host environment (Sebulba);
- `networks`: PrefixRL's convolutional Q-maps, the torso "prefix_conv";
- `search`, `front`, `fronts`: baselines (simulated annealing, random and Pareto local
  search), Pareto fronts and their hypervolume, plots, and the designs written as Verilog;
- `run_designs`, `run_front`: a run's greedy designs, and the front it found written into its
  directory when it ends;
- `presets`, `commands`, `bench`, `env_bench`: the `dqn-prefix*` presets, the commands
  `prefix-baseline`, `prefix-front` and `bench prefix`, and the environment's throughput.

Importing this package imports nothing heavy; import the submodules you need.
"""
