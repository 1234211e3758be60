"""`python -m dataloader` runs the service (the same as `dataloader serve`); subcommands work too."""

from dataloader.cli import main

if __name__ == "__main__":
    main()
