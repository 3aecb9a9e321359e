"""``python -m simulator.cli``: the ``llmplan`` command (:func:`simulator.cli.main`)."""
from simulator.cli import main

main()
