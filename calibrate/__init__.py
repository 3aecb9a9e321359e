"""Calibration: time real torch kernels on the device at hand and write a measured hardware profile.

Not implemented yet (issue "Calibration from real torch kernels"). The simulator reads profiles
through :mod:`simulator.profiles`; a measured profile will carry ``source: measured`` and per-op
tables beside its ``profile.yaml``. This package is the only place torch will be imported.
"""
