"""`python -m podracer ...` and the `podracer` console script: the command line
(`experiments.cli`), taken from podracer's own `experiments` package whatever the current
directory holds (`podracer.api.use_own_experiments`)."""

from __future__ import annotations

import sys

from podracer.api import use_own_experiments


def main(argv: list[str] | None = None) -> None:
    """Run the `podracer` command.

    Args:
        argv: the command's arguments (default: `sys.argv[1:]`).
    """
    try:
        use_own_experiments()
    except ImportError as error:
        print(f"podracer: error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    from experiments.cli import main as run  # once the right `experiments` is loaded (above)

    run(argv)


if __name__ == "__main__":
    main()
