"""Per-field help for a config tree, read from the config classes themselves.

A field's description is its trailing comment (`lr: float = 1e-3  # step size`) or, when
it has none, the comment lines directly above it. `podracer train PRESET --help` prints
every field of the preset's config with its type, the preset's value and that description.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import io
import textwrap
import tokenize
import typing
from typing import Any


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """`{field name: description}` for a dataclass, from the comments in its source."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    names = {field.name for field in dataclasses.fields(cls)}
    lines = source.splitlines()
    trailing: dict[int, str] = {}  # line number -> trailing comment
    comment_only: dict[int, str] = {}  # line number -> a line holding only a comment
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            row, col = token.start
            text = token.string.lstrip("#").strip()
            if lines[row - 1][:col].strip():
                trailing[row] = text
            else:
                comment_only[row] = text
    docs: dict[str, str] = {}
    for row, line in enumerate(lines, start=1):
        name = line.strip().split(":", 1)[0]
        if name not in names or ":" not in line or name in docs:
            continue
        if row in trailing:
            docs[name] = trailing[row]
            continue
        above, r = [], row - 1
        while r in comment_only:
            above.insert(0, comment_only[r])
            r -= 1
        if above:
            docs[name] = " ".join(above)
    for base in cls.__mro__[1:]:  # fields a config inherits are described where they are declared
        if dataclasses.is_dataclass(base):
            docs = {**field_docs(base), **docs}
    return docs


def type_name(annotation: Any) -> str:
    """A short, readable name for a field's annotation (`int`, `tuple[int, ...]`, `'a' | 'b'`)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " | ".join(repr(choice) for choice in typing.get_args(annotation))
    if origin is tuple:
        args = typing.get_args(annotation)
        if len(args) == 2 and args[1] is Ellipsis:
            return f"tuple[{type_name(args[0])}, ...]"
    if origin is not None:
        return str(annotation).replace("typing.", "")
    if annotation is type(None):
        return "None"
    return getattr(annotation, "__name__", str(annotation))


class FieldHelp(typing.NamedTuple):
    path: str  # dotted, as on the command line without the dashes
    type: str
    value: Any
    doc: str


def describe(config: Any, prefix: str = "") -> list[FieldHelp]:
    """Every leaf field of a config tree, in declaration order, with its help."""
    cls = type(config)
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    rows: list[FieldHelp] = []
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        path = f"{prefix}{field.name}"
        if dataclasses.is_dataclass(value):
            rows.extend(describe(value, path + "."))
        else:
            rows.append(FieldHelp(path, type_name(hints[field.name]), value, docs.get(field.name, "")))
    return rows


def format_help(name: str, config: Any, width: int = 100) -> str:
    """The text of `podracer train NAME --help`: usage, then every field by section."""
    out = [
        f"usage: podracer train {name} [--section.field VALUE ...] [--run-dir DIR] [--cpu-devices N]",
        "",
        f"Fields of preset {name!r} (value shown is the preset's; dashes may replace underscores):",
    ]
    section = None
    for row in describe(config):
        head = row.path.split(".")[0] if "." in row.path else ""
        if head != section:
            section = head
            title = f"{head} ({type(getattr(config, head)).__name__})" if head else "run"
            out += ["", f"{title}:"]
        flag = "--" + row.path.replace("_", "-")
        value = ",".join(map(str, row.value)) if isinstance(row.value, tuple) else row.value
        out.append(f"  {flag} {row.type}  (default: {value})")
        if row.doc:
            out.extend(textwrap.wrap(row.doc, width, initial_indent=" " * 6, subsequent_indent=" " * 6))
    return "\n".join(out)
