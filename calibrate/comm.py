"""All-reduce timings over ``torch.distributed``: NCCL across GPUs, gloo across CPU processes.

``world_size`` processes are spawned (one per GPU, or that many CPU processes on a CPU, each
limited to one thread); every rank times every message size with barriers between repeats, and
rank 0 reports the slowest rank's time per call, which is what a tensor-parallel layer waits for.
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from .kernels import TORCH_DTYPES


def _worker(rank: int, world: int, init_file: str, device_type: str, dtype: str, sizes: list[int],
            warmup: int, repeats: int, out_file: str) -> None:
    backend = "nccl" if device_type == "cuda" else "gloo"
    if device_type == "cpu":
        torch.set_num_threads(1)
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world)
    dev = torch.device("cuda", rank) if device_type == "cuda" else torch.device("cpu")
    if device_type == "cuda":
        torch.cuda.set_device(dev)
    tdtype = TORCH_DTYPES[dtype]
    results = []
    for nbytes in sizes:
        numel = max(1, nbytes // torch.tensor([], dtype=tdtype).element_size())
        x = torch.ones(numel, device=dev, dtype=tdtype)
        for _ in range(warmup):
            dist.all_reduce(x)
        times = []
        for _ in range(repeats):
            dist.barrier()
            if device_type == "cuda":
                torch.cuda.synchronize(dev)
            t0 = time.perf_counter()
            dist.all_reduce(x)
            if device_type == "cuda":
                torch.cuda.synchronize(dev)
            times.append(time.perf_counter() - t0)
        t = torch.tensor(times, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)     # the slowest rank sets the pace
        results.append(t.numpy())
    if rank == 0:
        np.save(out_file, np.stack(results))
    dist.barrier()
    dist.destroy_process_group()


def time_all_reduce(sizes: list[int], world: int, device: torch.device, dtype: str, timing: object) -> list[np.ndarray]:
    """Seconds per all-reduce call for each message size (bytes), one array of repeats each."""
    warmup = int(getattr(timing, "warmup", 3))
    repeats = int(getattr(timing, "min_repeats", 10))
    with tempfile.TemporaryDirectory() as tmp:
        init_file, out_file = str(Path(tmp) / "init"), str(Path(tmp) / "times.npy")
        mp.spawn(_worker, args=(world, init_file, device.type, dtype, list(sizes), warmup, repeats, out_file),
                 nprocs=world, join=True)
        arr = np.load(out_file)
    return [arr[i] for i in range(len(sizes))]
