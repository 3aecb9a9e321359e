"""Calibration: time real torch kernels on the device at hand and write a measured hardware profile.

* :mod:`calibrate.grid` derives the shape grid from a model spec and TP degree and estimates its
  memory (no torch);
* :mod:`calibrate.kernels` builds the kernels a serving engine runs per step (GEMMs, SDPA prefill
  and decode with GQA, RMSNorm, rotary, SiLU-and-multiply, residual add, KV-cache writes,
  sampling);
* :mod:`calibrate.comm` times all-reduce over ``torch.distributed`` (NCCL on GPUs, gloo on CPU);
* :mod:`calibrate.timing` times one kernel on the device (warm-up, CUDA events or the thread CPU
  clock, repeats, rotated inputs);
* :mod:`calibrate.runner` times the grid, keeps resumable partial results and writes ``ops.csv`` +
  ``profile.yaml`` (``source: measured``);
* :mod:`calibrate.importers` converts Vidur's and AIConfigurator's measurements into
  ``source: imported`` profiles (pandas only, no torch).

This package is the only place torch is imported; the simulator reads the written tables through
:mod:`simulator.cost.op_table` and :mod:`simulator.cost.table`. Nothing here imports torch at
package import time, so ``calibrate.importers`` and ``calibrate.grid`` work without it.
"""
