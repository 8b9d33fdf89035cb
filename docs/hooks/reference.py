"""The generated part of the documentation: the command line, the config sections and the
presets, written while the site builds from the code itself, so they cannot go stale.

`pages()` returns `{path in the site: markdown}`. It imports the `podracer` command's parser,
the presets and the config dataclasses; a field's description is the comment beside it in
the source, read by `experiments.help` exactly as `podracer train PRESET --help` reads it.
The MkDocs hook `on_files` adds these pages, the dated benchmark records under
`experiments/benchmarks/results/` and the notebooks of `experiments/notebooks/` to the site.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import textwrap
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if REPO not in sys.path:  # the pages are read from this checkout, installed or not
    sys.path.insert(0, REPO)
RESULTS = os.path.join(REPO, "experiments", "benchmarks", "results")
NOTEBOOKS = os.path.join(REPO, "experiments", "notebooks")


def _escape(text: str) -> str:
    """Markdown for a table cell: pipes and angle brackets escaped outside code spans."""
    parts = str(text).replace("\n", " ").split("`")
    for i in range(0, len(parts), 2):  # even parts are outside backticks
        parts[i] = parts[i].replace("<", "&lt;").replace(">", "&gt;").replace("|", "&#124;").replace("*", "\\*")
    for i in range(1, len(parts), 2):
        parts[i] = parts[i].replace("|", "&#124;")
    return "`".join(parts) if len(parts) % 2 else "`".join(parts).replace("`", "'")


def _value(value: Any) -> str:
    if isinstance(value, tuple):
        value = ",".join(map(str, value))
    text = "" if value == "" else str(value)
    return f"`{text}`" if text else '`""`'


def _field_table(rows: list[Any]) -> list[str]:
    out = ["| option | type | default | description |", "|---|---|---|---|"]
    for row in rows:
        flag = "--" + row.path.replace("_", "-")
        out.append(f"| `{flag}` | {_escape(row.type)} | {_value(row.value)} | {_escape(row.doc)} |")
    return out


def _sections(config: Any) -> dict[str, list[Any]]:
    """`{section: rows}` of a config tree, the run's own fields under ''."""
    from experiments.help import describe

    sections: dict[str, list[Any]] = {}
    for row in describe(config):
        sections.setdefault(row.path.split(".")[0] if "." in row.path else "", []).append(row)
    return sections


def _algorithm_names() -> dict[type, str]:
    from podracer.agents import algorithms

    return {algorithm.config: name for name, algorithm in algorithms().items()}


def preset_groups() -> dict[tuple[str, str], list[str]]:
    """`{(algorithm, architecture): [preset, ...]}` in the order `podracer list` shows."""
    from experiments.presets import PRESETS

    names = _algorithm_names()
    groups: dict[tuple[str, str], list[str]] = {}
    for preset, make in PRESETS.items():
        config = make()
        algorithm = names.get(type(config.agent), type(config.agent).__name__)
        groups.setdefault((algorithm, type(config.arch).__name__.removesuffix("Config")), []).append(preset)
    return dict(sorted(groups.items()))


def _doc(make: Any) -> str:
    return " ".join((make.__doc__ or "").split())


def preset_page(name: str) -> str:
    from experiments.presets import PRESETS

    make = PRESETS[name]
    config = make()
    algorithm = _algorithm_names().get(type(config.agent), type(config.agent).__name__)
    arch = type(config.arch).__name__.removesuffix("Config")
    out = [f"# {name}", "", _doc(make) or "", "",
           f"Algorithm: [{algorithm}](../config/agent-{algorithm}.md). "
           f"Architecture: [{arch}](../config/arch-{arch.lower()}.md).", "",
           "```bash", f"podracer train {name}", f"podracer train {name} --help   # this page's table, as text",
           "```", "",
           "Every field below can be overridden on the command line with its option. "
           "The default column is this preset's value.", ""]
    sections = _sections(config)
    for section, rows in {"": sections.pop(""), **sections}.items():
        title = f"`{section}` ({type(getattr(config, section)).__name__})" if section else "The run"
        out += [f"## {title}", "", *_field_table(rows), ""]
    return "\n".join(out)


def presets_index() -> str:
    from experiments.presets import PRESETS

    out = ["# Presets", "",
           "Every built-in preset, grouped by algorithm and architecture as `podracer list` shows them. "
           "Each page lists every field of the preset's config with its type, the preset's value and "
           "what it means.", ""]
    for (algorithm, arch), presets in preset_groups().items():
        out += [f"## {algorithm} / {arch}", "", "| preset | description |", "|---|---|"]
        out += [f"| [`{name}`]({name}.md) | {_escape(_doc(PRESETS[name]))} |" for name in presets]
        out.append("")
    return "\n".join(out)


def config_classes() -> dict[str, tuple[str, Any]]:
    """`{page: (title, a default instance)}` for every config section the presets use."""
    from anakin import AnakinConfig
    from podracer.agents import algorithms
    from podracer.config import CheckpointConfig, DistributedConfig, EnvConfig, LogConfig
    from sebulba import SebulbaConfig

    pages = {
        "env": ("`env`: the environment", EnvConfig()),
        "arch-anakin": ("`arch` for Anakin: AnakinConfig", AnakinConfig()),
        "arch-sebulba": ("`arch` for Sebulba: SebulbaConfig", SebulbaConfig()),
    }
    for name, algorithm in algorithms().items():
        pages[f"agent-{name}"] = (f"`agent` for {name}: {algorithm.config.__name__}", algorithm.config())
    pages["log"] = ("`log`: metrics sinks", LogConfig())
    pages["checkpoint"] = ("`checkpoint`: checkpoints and warm starts", CheckpointConfig())
    pages["distributed"] = ("`distributed`: several processes", DistributedConfig())
    return pages


def config_page(page: str, title: str, instance: Any) -> str:
    from experiments.help import describe

    section = page.split("-")[0]
    rows = describe(instance, prefix=f"{section}.")
    used = _presets_by_config().get(type(instance), [])
    out = [f"# {title}", "",
           f"Class: `{type(instance).__module__}.{type(instance).__qualname__}`. "
           "The default column is the class's default; a preset may set another "
           "(see its page under [Presets](../presets/index.md)).", "",
           *_field_table(rows), ""]
    if used and section in ("agent", "arch"):
        out += ["Presets with this section: " + ", ".join(f"[`{p}`](../presets/{p}.md)" for p in used) + ".", ""]
    return "\n".join(out)


def _presets_by_config() -> dict[type, list[str]]:
    from experiments.presets import PRESETS

    found: dict[type, list[str]] = {}
    for name, make in PRESETS.items():
        config = make()
        found.setdefault(type(config.agent), []).append(name)
        found.setdefault(type(config.arch), []).append(name)
    return found


def run_fields_page() -> str:
    from experiments.presets import PRESETS

    config = PRESETS["ppo-cartpole-anakin"]()
    return "\n".join(["# The run's own fields", "",
                      "Top-level fields of every config (shown with `ppo-cartpole-anakin`'s values).", "",
                      *_field_table(_sections(config)[""]), ""])


def config_index() -> str:
    out = ["# Config sections", "",
           "A config (`podracer.config.Config`) has a few fields of its own and six sections. "
           "`agent` is the algorithm's config and `arch` the architecture's, which picks Anakin or "
           "Sebulba. On the command line a field is `--section.field VALUE`, dashes or underscores.", "",
           "- [The run's own fields](run.md): `seed`, `total_env_steps`, `run_dir`"]
    for page, (title, _) in config_classes().items():
        out.append(f"- [{title}]({page}.md)")
    return "\n".join(out + [""])


def _option_row(action: argparse.Action) -> str:
    names = ", ".join(f"`{s}`" for s in action.option_strings) or f"`{action.metavar or action.dest}`"
    if action.choices:
        value = " &#124; ".join(f"`{c}`" for c in action.choices)
    elif action.nargs == 0:
        value = "flag"
    else:
        value = f"`{action.metavar or action.dest.upper()}`" + (" ..." if action.nargs in ("+", "*") else "")
    hidden = action.default is None or action.default is False or action.default == argparse.SUPPRESS
    default = "" if hidden or action.nargs == 0 else _value(action.default)
    required = " (required)" if action.required and action.option_strings else ""
    return f"| {names} | {value} | {default} | {_escape(action.help or '')}{required} |"


def cli_page() -> str:
    from experiments.cli_parser import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: choice.help for choice in sub._choices_actions}
    out = ["# The `podracer` command", "",
           "Every subcommand and its options, read from the command's own parser when this site was "
           "built. `podracer --version` prints the version; `python -m podracer` is the same command.", "",
           "`podracer train` and `podracer launch-local` also take any field of the preset's config as "
           "`--section.field VALUE`: see [Config sections](config/index.md) and each "
           "[preset's page](presets/index.md).", ""]
    for name, command in sub.choices.items():
        usage = " ".join(command.format_usage().split())
        out += [f"## `podracer {name}`", "", _escape(helps.get(name) or ""), ""]
        if command.description:
            out += ["```text", *[part.strip() for part in command.description.split(" | ")], "```", ""]
        usage = textwrap.wrap(usage.removeprefix("usage: "), 88, subsequent_indent="    ", break_on_hyphens=False,
                              break_long_words=False)
        out += ["```text", *usage, "```", ""]
        actions = [a for a in command._actions if not isinstance(a, argparse._HelpAction)]
        if actions:
            out += ["| argument | value | default | description |", "|---|---|---|---|"]
            out += [_option_row(action) for action in actions]
            out.append("")
    return "\n".join(out + ENVIRONMENT)


ENVIRONMENT = [
    "## Environment variables", "",
    "| variable | meaning |", "|---|---|",
    "| `PODRACER_IMPORT` | comma-separated modules every command imports first: your environments, algorithms and "
    "presets ([guide](../guides/jax-environment.md#from-the-command-line)); an installed package uses the "
    "`podracer.plugins` entry points instead ([plugins](../guides/plugins.md)) |",
    "| `PODRACER_COMPILATION_CACHE` | where compiled programs are kept (default `~/.cache/podracer/jax`); `off` turns "
    "the cache off ([first run](../getting-started/first-run.md#the-compilation-cache)) |",
    "| `PODRACER_COMPILATION_CACHE_MAX_MB` | the cache's bound, least recently used out (default 2048) |",
    "| `PODRACER_PREFIX_CACHE` | the prefix adders' synthesis cache "
    "(default `~/.cache/podracer/prefix-synthesis-<toolchain hash>.jsonl`) |",
    "| `PODRACER_NOTEBOOK_STEPS` | the notebooks' budget when the test suite runs them |",
    "| `XLA_FLAGS` | e.g. `--xla_force_host_platform_device_count=4` fakes 4 CPU devices (as `--cpu-devices 4`) |",
    "",
]


def pages() -> dict[str, str]:
    """Every generated page, `{path under docs/: markdown}`."""
    from experiments.presets import PRESETS

    generated = {"reference/cli.md": cli_page(), "reference/presets/index.md": presets_index(),
                 "reference/config/index.md": config_index(), "reference/config/run.md": run_fields_page()}
    for page, (title, instance) in config_classes().items():
        generated[f"reference/config/{page}.md"] = config_page(page, title, instance)
    for name in PRESETS:
        generated[f"reference/presets/{name}.md"] = preset_page(name)
    return generated


def records() -> list[str]:
    """The dated benchmark records, relative to `experiments/benchmarks/results/`."""
    found = []
    for root, _, files in os.walk(RESULTS):
        found += [os.path.relpath(os.path.join(root, f), RESULTS) for f in files]
    return sorted(found)


def records_page() -> str:
    out = ["# Benchmark records", "",
           "The raw records behind the [benchmark tables](index.md), one folder per machine and day, "
           "as kept in the repository under `experiments/benchmarks/results/`. Each is the output of "
           "the command its table names.", ""]
    notes = [record for record in records() if os.sep not in record]
    if notes:
        out += ["## Notes", "", "Dated lab notes: how the figures were reached, what changed between "
                "measurements, and what was tried without gain.", ""]
        out += [f"- [{os.path.splitext(note)[0]}](records/{note})" for note in notes]
    folder = None
    for record in records():
        if os.sep not in record:
            continue
        head = record.split(os.sep)[0]
        if head != folder:
            folder = head
            out += ["", f"## {folder}", ""]
        out.append(f"- [{os.path.basename(record)}](records/{record})")
    return "\n".join(out + [""])


def on_files(files: Any, config: Any) -> Any:
    """MkDocs hook: add the generated pages, the records and the notebooks to the site."""
    from mkdocs.structure.files import File

    for path, text in {**pages(), "benchmarks/records.md": records_page()}.items():
        files.append(File.generated(config, path, content=text))
    for record in records():
        files.append(File.generated(config, f"benchmarks/records/{record}",
                                    abs_src_path=os.path.join(RESULTS, record)))
    for notebook in sorted(os.listdir(NOTEBOOKS)):
        if notebook.endswith(".ipynb"):  # to download, as kept under experiments/notebooks/
            files.append(File.generated(config, f"getting-started/notebooks/{notebook}",
                                        abs_src_path=os.path.join(NOTEBOOKS, notebook)))
    return files


def _check() -> None:  # pragma: no cover - a quick look: python docs/hooks/reference.py
    for path, text in pages().items():
        assert re.match(r"# ", text), path
    print(len(pages()), "pages")


if __name__ == "__main__":
    _check()
