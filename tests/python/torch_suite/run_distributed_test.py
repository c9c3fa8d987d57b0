#!/usr/bin/env python3
"""PyTorch's own generic distributed tests (torch.testing._internal.distributed.distributed_test, the
suite behind PyTorch's test_distributed_spawn.py) run against backend="commkit".

    PYTHONPATH=<build>/torch-plain/python/pkg WORLD_SIZE=2 \
      python -m pytest tests/python/torch_suite/run_distributed_test.py -q -rfEs -k 'not cuda and not nccl'

or, for the whole CPU part with a summary, tests/python/torch_suite/run_suite.py (docs/pytorch.md).

Two test classes, the same tests:
- TestDistBackendWithFork (the default to run): each test forks its ranks from this already
  initialised process, as PyTorch's former test_distributed_fork.py did. A rank starts in
  milliseconds instead of re-importing torch and the suite (about a minute per test on a busy 2-core
  machine). Fork is sound here because this parent never creates a process group, a CUDA context or
  an OpenMP pool before forking (OMP_NUM_THREADS=1 is set below so it cannot); each rank initialises
  its own group after the fork.
- TestDistBackendWithSpawn: the same with spawned ranks, as PyTorch runs it; slow.

commkit is declared to the suite as a backend with DDP, subgroups, GPU support and plugin status (its
feature tables only list gloo/nccl/ucc); everything else (gloo-only or CUDA-only tests) skips with the suite's
own reason. Each test is bounded by the suite's own join timeout (DISTRIBUTED_TESTS_DEFAULT_TIMEOUT,
set to 120 s below unless given) after which its ranks are killed and the test fails.
"""

import os
import tempfile

os.environ.setdefault("BACKEND", "commkit")
os.environ.setdefault("WORLD_SIZE", "2")
os.environ.setdefault("DISTRIBUTED_TESTS_DEFAULT_TIMEOUT", "120")
os.environ.setdefault("OMP_NUM_THREADS", "1")
if "TEMP_DIR" not in os.environ:
    os.environ["TEMP_DIR"] = tempfile.mkdtemp(prefix="commkit-torch-suite-")

import commkit  # noqa: E402,F401  registers the backend (in spawned ranks too: they import this file)
import torch.multiprocessing  # noqa: E402
from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

# "gpu"/"cuda": commkit runs CUDA tensors (on its NCCL backend); on a machine without GPUs the tests
# that need one still skip by their own device checks.
for feature in ("ddp", "subgroup", "plugin", "gpu", "cuda"):
    DistTestCases.backend_feature[feature].add("commkit")
DistTestCases.skip_collective["sendrecv anysource"].add("commkit")

from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend  # noqa: E402


class TestDistBackendWithFork(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._start_processes(torch.multiprocessing.get_context("fork").Process)


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()


if __name__ == "__main__":
    run_tests()
