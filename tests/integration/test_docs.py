"""The commands the documentation shows: every `podracer ...` command in README.md,
ARCHITECTURE.md, CHANGELOG.md, the documentation site's pages (docs/**/*.md) and the
presets' docstrings parses, names presets that exist, and its overrides resolve to fields of
that preset's config; every Python snippet compiles; every relative link of the README and
the site's pages reaches a file; the generated reference covers every preset, field and
command; and the site builds with `mkdocs build --strict` where the docs extra is installed.
Nothing is trained: a renamed preset, field or option fails here, not in the hands of a
reader who copies the command."""

from __future__ import annotations

import glob
import importlib.util
import os
import re
import shlex
import subprocess
import sys

import pytest

from experiments.cli_parser import build_parser, preset_and_overrides
from experiments.overrides import apply_overrides, field_paths, option_aliases
from experiments.presets import all_presets

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SITE = sorted(os.path.relpath(path, REPO) for path in glob.glob(os.path.join(REPO, "docs", "**", "*.md"), recursive=True))
DOCS = ["README.md", "ARCHITECTURE.md", "CHANGELOG.md"] + SITE
SOURCES = DOCS + sorted(os.path.relpath(path, REPO) for path in glob.glob(os.path.join(REPO, "experiments", "presets*.py")))
# Presets the README names as a user's own (registered through PODRACER_IMPORT), not built in.
USER_PRESETS = {"walk-ppo-anakin", "ppo-toycatch-anakin"}  # and the plugins guide's toy plugin
# Placeholders the README's commands use for values, and what stands in for them here.
PLACEHOLDER_VALUES = {"N": "2", "PROCESS_ID": "1", "K": "1"}
OWN_OPTIONS = {"train": ("--resume", "--cpu-devices"), "launch-local": ("--resume", "--cpu-devices", "-n",
                                                                       "--num-processes")}


def _read(path: str) -> str:
    with open(os.path.join(REPO, path)) as f:
        return f.read()


def _code_blocks(text: str) -> list[str]:
    """The lines of every fenced code block, continuation lines (`\\`) joined."""
    blocks, block = [], None
    for line in text.splitlines():
        if line.startswith("```"):
            if block is not None:
                blocks.append("\n".join(block).replace("\\\n", " "))
            block = [] if block is None else None
        elif block is not None:
            block.append(line)
    return [line for block in blocks for line in block.splitlines()]


def documented_commands() -> list[tuple[str, str]]:
    """`(file, command)` for every `podracer ...` command in a code block (comments
    dropped) or in inline code of the docs; an inline name of a command (`podracer
    evaluate`, `podracer bench table`) is not one."""
    found = []
    for path in SOURCES:
        text = _read(path)
        inline = re.findall(r"`(podracer [^`]+)`", re.sub(r"\s*\n\s*", " ", text))
        inline = [command for command in inline if len(command.split()) > (3 if " bench " in command else 2)]
        for line in _code_blocks(text) + inline:
            line = line.split("#")[0].strip()
            start = line.find("podracer ")
            if start >= 0 and "PODRACER_IMPORT=" not in line:  # a user's presets, not built in
                found.append((path, " ".join(line[start:].split())))
    return found


def _is_placeholder(token: str) -> bool:
    return bool(re.fullmatch(r"[A-Z][A-Z_.]*|<.*>|.*\.\.\..*|\[.*", token))


def _tokens(command: str) -> list[str]:
    command = re.sub(r"\[[^\]]*\]", " ", command)  # optional parts: `[--agent.field VALUE ...]`
    return [PLACEHOLDER_VALUES.get(token, token) for token in shlex.split(command)[1:]]


COMMANDS = documented_commands()


def test_the_docs_show_commands():
    subcommands = {_tokens(command)[0] for _, command in COMMANDS if _tokens(command)}
    assert {"train", "launch-local", "evaluate", "plot", "bench", "prefix-baseline", "prefix-front"} <= subcommands
    assert len(COMMANDS) > 40, COMMANDS


@pytest.mark.parametrize("path, command", COMMANDS, ids=[f"{p}:{c}" for p, c in COMMANDS])
def test_documented_command_resolves(path, command):
    """The command's options exist (argparse, as the command line parses them), its
    presets exist, and its `--section.field VALUE` overrides apply to the preset's config."""
    tokens = _tokens(command)
    if not tokens or USER_PRESETS & set(tokens):  # `podracer` alone; a user's or plugin's preset
        return
    args, rest = build_parser().parse_known_args(tokens)
    population = None
    if args.command in OWN_OPTIONS:
        preset, rest = preset_and_overrides(tokens[1:], OWN_OPTIONS[args.command])
        rest = [token for token in rest if token not in ("-h", "--help")]
        presets = [] if preset is None or _is_placeholder(preset) else [preset]
        if args.command == "train":  # --sweep, --sweep-samples, --sweep-each, as `podracer train` reads them
            from experiments.sweep import split_population_args

            population = split_population_args(rest)
            rest = population.rest
    elif args.command == "bench" and args.arch == "gpu":  # its own parts and presets
        presets = []
    elif args.command == "bench":
        if args.arch == "prefix" and args.preset is None and args.run_dir is None:
            args.preset = f"dqn-prefix{args.bits}-sebulba"
        presets = args.presets or [args.preset or f"ppo-cartpole-{args.arch}"] if args.run_dir is None else []
    else:
        assert not rest, f"{path}: `{command}`: unexpected arguments {rest}"
        return
    for preset in presets:
        assert preset in all_presets(), f"{path}: `{command}` names no preset {preset!r}"
        config = all_presets()[preset]()
        if population is not None:
            from experiments.sweep import with_population_args

            config = with_population_args(config, population.sweeps, population.samples)
        config = apply_overrides(config, rest)  # ConfigError naming a field that is not there
        for entry in population.each if population is not None else []:
            field = entry.partition("=")[0]
            assert field in field_paths(config), f"{path}: `{command}` sweeps no field {field!r}"
        if args.command == "bench" and args.arch == "prefix":
            from experiments.prefix.bench import check_agent_config

            check_agent_config(config, args.bits)


def test_presets_and_fields_named_in_the_docs_exist():
    """Every preset the docs name (`ppo-...-anakin`, inline or in a table; `{a,b}` expanded)
    is one, and every `--section.field` they mention is a field of some preset's config (or
    a registered option alias);
    `PRESET --field VALUE` in inline code resolves against that preset."""
    fields = set().union(*(field_paths(make()) for make in all_presets().values()), option_aliases())
    for path in DOCS:
        text = re.sub(r"\s*\n\s*", " ", _read(path))
        for name in re.findall(r"(?<![/\w.-])([a-z0-9]+(?:-[a-z0-9{},]+)*-(?:anakin|sebulba))\b", text):
            expanded = [name]
            while any("{" in n for n in expanded):
                expanded = [re.sub(r"\{[^}]*\}", choice, n, count=1) for n in expanded
                            for choice in re.search(r"\{([^}]*)\}", n).group(1).split(",")]
            for preset in expanded:
                assert preset in all_presets() or preset in USER_PRESETS, f"{path} names no preset {preset!r}"
        for option in re.findall(r"--([a-z][a-z0-9-]*\.[a-z][a-z0-9-]*)", text):
            if option not in ("section.field", "agent.field"):  # the grammar's own placeholders
                assert option.replace("-", "_") in fields, f"{path} names no field --{option}"
        for preset, overrides in re.findall(r"`([a-z0-9-]+-(?:anakin|sebulba)) (--[^`]+)`", text):
            apply_overrides(all_presets()[preset](), shlex.split(overrides))


def _fenced(text: str, language: str) -> list[str]:
    """The code of every fenced block in `language`."""
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.S | re.M)


def test_python_snippets_compile():
    """Every ```python block of the docs is valid Python (names are not run)."""
    snippets = [(path, code) for path in DOCS for code in _fenced(_read(path), "python")]
    assert len(snippets) >= 8, snippets
    for path, code in snippets:
        compile(code, f"{path} (python block)", "exec")


def test_relative_links_reach_files():
    """A relative link (`[text](docs/guides/replay.md#anchor)`) of the README or a site page
    names a file that exists (the generated reference pages and records are built, not kept)."""
    generated = ("reference/cli.md", "reference/config/", "reference/presets/", "benchmarks/records",
                 "getting-started/notebooks/")
    for path in ["README.md"] + SITE:
        for target in re.findall(r"\]\(([^)\s]+)\)", _read(path)):
            target = target.split("#")[0]
            if not target or re.match(r"[a-z]+:", target):
                continue
            resolved = os.path.normpath(os.path.join(REPO, os.path.dirname(path), target))
            if any(part in os.path.relpath(resolved, os.path.join(REPO, "docs")) for part in generated):
                continue
            assert os.path.exists(resolved), f"{path} links to {target}, which does not exist"


def _reference_module():
    spec = importlib.util.spec_from_file_location("docs_reference", os.path.join(REPO, "docs", "hooks", "reference.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_reference_covers_every_preset_field_and_command():
    """The site's reference is generated from the code (docs/hooks/reference.py): a page per
    preset naming every one of its fields as an option, a page per config section, and the
    command page naming every subcommand and option of the parser."""
    reference = _reference_module()
    pages = reference.pages()
    for name, make in all_presets().items():
        page = pages[f"reference/presets/{name}.md"]
        for field in field_paths(make()):
            assert f"`--{field.replace('_', '-')}`" in page, f"{name}'s page lacks --{field}"
        assert f"]({name}.md)" in pages["reference/presets/index.md"], name
    cli = pages["reference/cli.md"]
    parser = build_parser()
    for command, sub in parser._subparsers._group_actions[0].choices.items():
        assert f"## `podracer {command}`" in cli, command
        for action in sub._actions:
            for option in action.option_strings:
                assert f"`{option}`" in cli, f"podracer {command} {option}"
    for page in reference.config_classes():
        assert f"reference/config/{page}.md" in pages


@pytest.mark.slow
def test_site_builds_strict(tmp_path):
    """`mkdocs build --strict`: a broken link, a missing anchor or an API entry that does not
    resolve fails it."""
    if any(importlib.util.find_spec(name) is None for name in ("mkdocs", "material", "mkdocstrings_handlers")):
        pytest.skip("needs the docs extra: pip install -e '.[docs]'")
    env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert (tmp_path / "site" / "reference" / "presets" / "ppo-cartpole-anakin" / "index.html").exists()
