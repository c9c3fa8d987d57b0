"""Every torch.distributed operation on backend="commkit" (2 and 3 ranks), and commkit's errors as
Python exceptions: a mismatched collective (per-rank diff) and a dead rank (named)."""

import pytest

from _launch import check, run_ranks


@pytest.mark.parametrize("world", [2, 3])
def test_operations(tmp_path, world):
    results = run_ranks("_ops_worker.py", world, ["ops"], tmp_path)
    check(results, f"operations at {world} ranks")
    for r in results:
        assert "check_async ok" in r.stdout and "done" in r.stdout, r.stdout


def test_gloo_host_backend_is_refused_clearly(tmp_path):
    """COMMKIT_TORCH_HOST_BACKEND=gloo would crash inside torch (two Gloos in one process): refused."""
    results = run_ranks("_ops_worker.py", 1, ["ops"], tmp_path, {"COMMKIT_TORCH_HOST_BACKEND": "gloo"}, timeout=120)
    assert results[0].returncode != 0
    assert "cannot run inside PyTorch" in results[0].stdout, results[0].stdout


def test_mismatch_raises_with_per_rank_diff(tmp_path):
    results = run_ranks("_ops_worker.py", 2, ["mismatch"], tmp_path)
    check(results, "mismatch")
    for r in results:
        assert "mismatch reported" in r.stdout, r.stdout
        assert "count=4" in r.stdout and "count=5" in r.stdout, r.stdout


def test_dead_rank_is_named(tmp_path):
    results = run_ranks("_ops_worker.py", 3, ["dead"], tmp_path, {"COMMKIT_TEST_TIMEOUT_S": "5"}, timeout=120)
    check(results, "dead rank")
    for r in results[:-1]:
        assert "dead rank named" in r.stdout, r.stdout
