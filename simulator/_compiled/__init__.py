"""Where an install puts the compiled engine: mypyc's translation of the modules listed in
``setup.py`` (one extension per module and their shared library) and ``manifest.json``, which
names the sources they were built from. Nothing here is imported directly: :mod:`simulator.native`
loads these extensions in place of the same-named modules while the sources still match."""
