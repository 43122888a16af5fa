import os

import pytest
import torch

# Two CPU cores on the lab's machines: keep torch from oversubscribing them.
torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


def pytest_collection_modifyitems(config, items):
    """Skip @pytest.mark.gpu tests where there is no CUDA device (CPU CI); they run on the lent GPU."""
    try:
        from fp8lab.kernels import cuda_available

        have_gpu = cuda_available()
    except Exception:
        have_gpu = False
    if have_gpu:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (run on the GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
