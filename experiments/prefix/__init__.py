"""Prefix-adder design (PrefixRL, Roy et al., DAC 2021) as a podracer application.

- `graph`: prefix graphs on the N x N grid, legalisation, levels, fanout, actions (NumPy);
- `builders`: ripple, Sklansky, Kogge-Stone, Brent-Kung;
- `netlist`: the adder as gates, Verilog and BLIF, and a simulator that checks it adds;
- `jax_graph` and `env`: the same dynamics in JAX, the Anakin environment `PrefixAdder-<N>`;
- `synthesis`, `reward_pool`, `host_env`: rewards from Yosys/ABC through a pool of reward
  workers, and the host environment (Sebulba);
- `search` and `front`: baselines (simulated annealing, random search), Pareto fronts and
  their hypervolume, and the designs written as Verilog.

Importing this package imports nothing heavy; import the submodules you need.
"""
