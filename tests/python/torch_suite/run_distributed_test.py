#!/usr/bin/env python3
"""PyTorch's own generic distributed tests (torch.testing._internal.distributed.distributed_test, the
suite behind PyTorch's test_distributed_spawn.py) run against backend="commkit".

    PYTHONPATH=<build>/torch-plain/python/pkg WORLD_SIZE=2 \
      python -m pytest tests/python/torch_suite/run_distributed_test.py -q -rfEs

commkit is declared to the suite as a backend with DDP, subgroups and plugin status (its feature
tables only list gloo/nccl/ucc); everything else (gloo-only or CUDA-only tests) skips with the suite's
own reason. Results and the reason for each failure class are in docs/pytorch.md. Not part of CTest
(it takes minutes per test on a small machine).
"""

import os
import sys
import tempfile

os.environ.setdefault("BACKEND", "commkit")
os.environ.setdefault("WORLD_SIZE", "2")
if "TEMP_DIR" not in os.environ:
    os.environ["TEMP_DIR"] = tempfile.mkdtemp(prefix="commkit-torch-suite-")

import commkit  # noqa: E402,F401  registers the backend (in the spawned ranks too: they import this file)
from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

for feature in ("ddp", "subgroup", "plugin"):
    DistTestCases.backend_feature[feature].add("commkit")
DistTestCases.skip_collective["sendrecv anysource"].add("commkit")

from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend  # noqa: E402


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()


if __name__ == "__main__":
    run_tests()
