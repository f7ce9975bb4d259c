"""``python -m engine`` is the ``engine`` command."""

from engine.cli import main

main()
