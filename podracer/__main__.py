"""`python -m podracer ...`: the `podracer` command (`experiments.cli`)."""

from experiments.cli import main

if __name__ == "__main__":
    main()
