"""Every torch.distributed operation on backend="commkit" (2 and 3 ranks), and commkit's errors as
Python exceptions: a mismatched collective (per-rank diff) and a dead rank (named)."""

import os
import signal
import subprocess
import sys
import time

import pytest

from _launch import HERE, base_env, check, run_ranks


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


def test_failed_work_exception_returns_the_error(tmp_path):
    """Work.exception() of a failed async all_reduce returns its DistBackendError (torch 2.11's own
    binding raises TypeError for any Work; commkit's Works answer it)."""
    results = run_ranks("_ops_worker.py", 2, ["failed_work"], tmp_path)
    check(results, "failed work")
    for r in results:
        assert "exception() returned DistBackendError" in r.stdout, r.stdout


def test_sigterm_stops_a_rank_at_once(tmp_path):
    ready = tmp_path / "ready"
    env = base_env({"RANK": "0", "WORLD_SIZE": "1", "COMMKIT_TEST_INIT": f"file://{tmp_path / 'init'}",
                    "COMMKIT_TEST_READY": str(ready)})
    proc = subprocess.Popen([sys.executable, str(HERE / "_ops_worker.py"), "sigterm"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), f"the rank did not get ready: {proc.poll()}"
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"the rank did not stop within 20 s of SIGTERM; output:\n{out}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == -signal.SIGTERM, f"exit status {proc.returncode}; output:\n{out}"
