"""CUDA tensors at world size 1 (skips without a GPU)."""

import pytest
import torch

from _launch import check, run_ranks


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_tensors_world_size_1(tmp_path):
    results = run_ranks("_cuda_worker.py", 1, [], tmp_path, timeout=180)
    check(results, "cuda world size 1")
    assert "cuda ok" in results[0].stdout, results[0].stdout
