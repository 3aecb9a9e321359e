"""Imported profiles: other people's per-op measurements converted to our table (``source: imported``).

* **Vidur** (microsoft/vidur, MIT): per-layer op times of whole model configurations on H100/A100
  (``data/profiling/compute/<gpu>/<model>/mlp.csv``; a copy of some lives in
  ``shared/data/llm_traces/vidur_profiling/``) and NCCL all-reduce times
  (``network/<node>/all_reduce.csv``). Its attention tables are not in that copy, so imported
  Vidur profiles time attention with the datasheet roofline of the GPU (the ``table`` cost model
  says so in its ``sources``).
* **AIConfigurator** (``aiconfigurator-core`` on PyPI, Apache-2.0): NVIDIA's per-op kernel
  database (GEMM ``m x n x k`` in bf16 and fp8, context and generation attention with 16-bit and
  fp8 KV caches, the frameworks' all-reduce and NCCL) for H100/H200/B200/A100/L40S, read from the
  wheel file, an unpacked wheel or the installed package (:class:`AicDatabase`).
* **The shipped defaults** (:func:`import_default`): a compact grid of the AIConfigurator tables
  plus Vidur's elementwise tables where Vidur measured the GPU, with roofline efficiencies fitted
  to the measured rows for what neither measured (``cost_model: kernel_table``).

No torch here: importing needs pandas only. Each importer takes the datasheet profile of the same
GPU (``<gpu>-datasheet``) as the base (memory, peaks, interconnect, price), adds the table, and
records where every number came from.

The modules: :mod:`~calibrate.importers.vidur`, :mod:`~calibrate.importers.aiconfigurator`,
:mod:`~calibrate.importers.defaults` (the shipped profiles) and :mod:`~calibrate.importers.writing`
(the table row, one row per shape, the profile written), which the others share.
"""
from calibrate.importers.aiconfigurator import AIC_SYSTEMS, AicDatabase, aiconfigurator_tables, import_aiconfigurator
from calibrate.importers.defaults import import_default
from calibrate.importers.vidur import import_vidur

__all__ = ["AIC_SYSTEMS", "AicDatabase", "aiconfigurator_tables", "import_aiconfigurator", "import_default",
           "import_vidur"]
