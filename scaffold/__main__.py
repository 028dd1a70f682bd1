"""``python -m scaffold``: the ``scaffold`` command line (see :mod:`scaffold.cli`)."""

from scaffold.cli import main

if __name__ == "__main__":
    main(prog_name="scaffold")
