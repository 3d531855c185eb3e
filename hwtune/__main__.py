"""``python -m hwtune`` runs the CLI."""

from hwtune.cli.main import main

if __name__ == "__main__":
    main()
