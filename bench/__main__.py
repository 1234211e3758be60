"""`python -m bench <measure|all> [--systems ...] [--runs N] [--quick]`."""

from bench.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
