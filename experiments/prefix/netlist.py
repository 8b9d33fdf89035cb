"""The adder a prefix graph describes, as a gate netlist, Verilog, BLIF, and a simulator.

Bit i's generate and propagate are `g_i = a_i & b_i`, `p_i = a_i ^ b_i`. A node (i, j)
with upper parent U = (i, k) and lower parent L = (k - 1, j) computes
`G = G_U | (P_U & G_L)` and, where some node needs it (j > 0), `P = P_U & P_L`. The sum is
`s_0 = p_0`, `s_i = p_i ^ G(i-1, 0)`, and the carry out `s_N = G(N-1, 0)`: the module adds
two N-bit numbers into N + 1 bits.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from experiments.prefix.graph import check_graph, compute_nodes, is_legal, parents

OPS = ("and", "or", "xor")


class Gate(NamedTuple):
    """`out = op(a, b)`, two-input, `op` in OPS; nets are strings."""

    out: str
    op: str
    a: str
    b: str


class Netlist(NamedTuple):
    """Inputs `a[0..N-1]`, `b[0..N-1]`, output `s[0..N]`; gates in topological order."""

    bits: int
    gates: list[Gate]
    outputs: list[str]  # the net driving s[i], i = 0..N


def _g(i: int, j: int) -> str:
    return f"g_{i}_{j}"


def _p(i: int, j: int) -> str:
    return f"p_{i}_{j}"


def netlist(nodes: np.ndarray) -> Netlist:
    """The adder of a legal graph. Raises ValueError for an illegal one."""
    check_graph(nodes)
    if not is_legal(nodes):
        raise ValueError("the graph is not legal (a node's lower parent is missing); legalize it first")
    n = nodes.shape[0]
    gates = []
    for i in range(n):
        gates.append(Gate(_g(i, i), "and", f"a[{i}]", f"b[{i}]"))
        gates.append(Gate(_p(i, i), "xor", f"a[{i}]", f"b[{i}]"))
    for i, j in compute_nodes(nodes):
        (_, k), (lo, _) = parents(nodes, i, j)
        gates.append(Gate(f"t_{i}_{j}", "and", _p(i, k), _g(lo, j)))
        gates.append(Gate(_g(i, j), "or", _g(i, k), f"t_{i}_{j}"))
        if j > 0:
            gates.append(Gate(_p(i, j), "and", _p(i, k), _p(lo, j)))
    outputs = [_p(0, 0)]
    for i in range(1, n):
        gates.append(Gate(f"s_{i}", "xor", _p(i, i), _g(i - 1, 0)))
        outputs.append(f"s_{i}")
    outputs.append(_g(n - 1, 0))
    return Netlist(n, gates, outputs)


def simulate(net: Netlist, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Evaluate the netlist on operand vectors `a, b` (`uint64 [S]`, < 2^N, N <= 63):
    the sums `uint64 [S]`."""
    if net.bits > 63:
        raise ValueError("simulate handles at most 63 bits (sums fit in uint64)")
    a, b = np.asarray(a, np.uint64), np.asarray(b, np.uint64)
    values: dict[str, np.ndarray] = {}
    for i in range(net.bits):
        values[f"a[{i}]"] = (a >> np.uint64(i)) & np.uint64(1)
        values[f"b[{i}]"] = (b >> np.uint64(i)) & np.uint64(1)
    for gate in net.gates:
        x, y = values[gate.a], values[gate.b]
        values[gate.out] = x & y if gate.op == "and" else x | y if gate.op == "or" else x ^ y
    total = np.zeros_like(a)
    for i, out in enumerate(net.outputs):
        total |= values[out] << np.uint64(i)
    return total


def check_adds(nodes: np.ndarray, samples: int = 1000, seed: int = 0) -> None:
    """Raise AssertionError unless the graph's netlist adds `samples` random operand pairs
    (plus the all-ones and zero corner cases) correctly."""
    net = netlist(nodes)
    n = net.bits
    rng = np.random.default_rng(seed)
    top = (1 << n) - 1
    a = np.concatenate([rng.integers(0, 1 << n, samples, dtype=np.uint64), np.array([top, top, 0], np.uint64)])
    b = np.concatenate([rng.integers(0, 1 << n, samples, dtype=np.uint64), np.array([top, 1, 0], np.uint64)])
    got = simulate(net, a, b)
    bad = np.flatnonzero(got != a + b)
    if bad.size:
        k = bad[0]
        raise AssertionError(f"{n}-bit adder: {int(a[k])} + {int(b[k])} gave {int(got[k])}")


def _verilog_net(name: str) -> str:
    return name  # a[3], b[3] and plain identifiers are valid Verilog as they are


def to_verilog(nodes: np.ndarray, module: str = "prefix_adder") -> str:
    """A Verilog module `module(a, b, s)` adding two N-bit numbers into N + 1 bits."""
    net = netlist(nodes)
    n = net.bits
    operator = {"and": "&", "or": "|", "xor": "^"}
    wires = [gate.out for gate in net.gates]
    lines = [
        f"// {n}-bit parallel prefix adder: {len(compute_nodes(nodes))} prefix nodes",
        f"module {module}(input [{n - 1}:0] a, input [{n - 1}:0] b, output [{n}:0] s);",
    ]
    for start in range(0, len(wires), 12):
        lines.append("  wire " + ", ".join(wires[start:start + 12]) + ";")
    for gate in net.gates:
        lines.append(f"  assign {gate.out} = {_verilog_net(gate.a)} {operator[gate.op]} {_verilog_net(gate.b)};")
    for i, out in enumerate(net.outputs):
        lines.append(f"  assign s[{i}] = {out};")
    lines.append("endmodule")
    return "\n".join(lines) + "\n"


_BLIF_COVER = {"and": ["11 1"], "or": ["1- 1", "-1 1"], "xor": ["10 1", "01 1"]}


def to_blif(nodes: np.ndarray, model: str = "prefix_adder") -> str:
    """The same adder in BLIF (`.names` covers), for ABC."""
    net = netlist(nodes)
    n = net.bits
    lines = [
        f".model {model}",
        ".inputs " + " ".join(f"a[{i}]" for i in range(n)) + " " + " ".join(f"b[{i}]" for i in range(n)),
        ".outputs " + " ".join(f"s[{i}]" for i in range(n + 1)),
    ]
    for gate in net.gates:
        lines.append(f".names {gate.a} {gate.b} {gate.out}")
        lines.extend(_BLIF_COVER[gate.op])
    for i, out in enumerate(net.outputs):
        lines.append(f".names {out} s[{i}]")
        lines.append("1 1")
    lines.append(".end")
    return "\n".join(lines) + "\n"


def simulate_blif(text: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Evaluate a combinational BLIF (`.names` covers with 1-outputs, in topological order,
    as `to_blif` writes) on 0/1 arrays per input: every output's values."""
    values = {name: np.asarray(v, np.uint8) for name, v in inputs.items()}
    outputs: list[str] = []
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    index = 0
    while index < len(lines):
        words = lines[index].split()
        index += 1
        if words[0] == ".outputs":
            outputs = words[1:]
        elif words[0] == ".names":
            *ins, out = words[1:]
            cubes = []
            while index < len(lines) and not lines[index].startswith("."):
                cubes.append(lines[index].split())
                index += 1
            shape = np.shape(next(iter(values.values())))
            result = np.zeros(shape, np.uint8)
            for cube in cubes:
                pattern, bit = (cube[0], cube[1]) if len(cube) == 2 else ("", cube[0])
                if bit != "1":
                    raise ValueError("simulate_blif handles on-set covers only")
                hit = np.ones(shape, bool)
                for name, want in zip(ins, pattern):
                    if want != "-":
                        hit &= values[name] == int(want)
                result |= hit.astype(np.uint8)
            values[out] = result
    return {name: values[name] for name in outputs}
