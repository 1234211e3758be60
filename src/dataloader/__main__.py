"""`python -m dataloader` is the service's entry point (003 §3): with no arguments it runs the service,
the same as `dataloader serve`; with arguments it is the CLI (`python -m dataloader jobs status ID`).
The `dataloader` script itself prints help when called bare (see cli/__init__.py)."""

import sys

from dataloader.cli import main

if __name__ == "__main__":
    main(sys.argv[1:] or ["serve"])
