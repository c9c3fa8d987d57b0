"""Starting ranks of a worker script for the python_* tests: as plain subprocesses, under torchrun or
under commkit-run. Every launch is bounded in time; a timeout kills the whole process group."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
TIMEOUT_S = 240


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def base_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    # The package under test: CTest sets PYTHONPATH to the build's package directory.
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(HERE), env.get("PYTHONPATH", "")] if p)
    env.update(extra or {})
    return env


def _run(cmd: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"{' '.join(cmd)} did not finish within {timeout} s; output:\n{out}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, "")


def run_ranks(script: str, n: int, args: list[str], tmp: Path, extra_env: dict[str, str] | None = None,
              timeout: float = TIMEOUT_S) -> list[subprocess.CompletedProcess]:
    """Starts n ranks of `script` with RANK/WORLD_SIZE and a file:// init method; returns each result."""
    init = f"file://{tmp / 'init'}"
    procs = []
    for r in range(n):
        env = base_env({"RANK": str(r), "WORLD_SIZE": str(n), "LOCAL_RANK": str(r), "COMMKIT_TEST_INIT": init,
                        **(extra_env or {})})
        procs.append(subprocess.Popen([sys.executable, str(HERE / script), *args], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True, start_new_session=True))
    results = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                try:
                    os.killpg(q.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            out, _ = p.communicate()
            raise AssertionError(f"{script} rank did not finish within {timeout} s; output:\n{out}")
        results.append(subprocess.CompletedProcess(p.args, p.returncode, out, ""))
    return results


def torchrun(script: str, n: int, args: list[str], extra_env: dict[str, str] | None = None,
             timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(n), "--master-addr", "127.0.0.1",
           "--master-port", str(free_port()), str(HERE / script), *args]
    return _run(cmd, base_env(extra_env), timeout)


def commkit_run_binary() -> Path | None:
    for d in [os.environ.get("COMMKIT_BIN_DIR", "")]:
        if d and (Path(d) / "commkit-run").is_file():
            return Path(d) / "commkit-run"
    return None


def commkit_run(script: str, n: int, args: list[str], tmp: Path, extra_env: dict[str, str] | None = None,
                timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess:
    """commkit-run hosts its own store on MASTER_PORT, so torch.distributed rendezvouses through a
    file:// init method here (COMMKIT_TEST_INIT) rather than env:// (whose TCPStore wants that port)."""
    binary = commkit_run_binary()
    assert binary is not None, "commkit-run not found (set COMMKIT_BIN_DIR)"
    cmd = [str(binary), "-n", str(n), "--timeout", str(int(timeout - 10)), "--", sys.executable, str(HERE / script),
           *args]
    env = base_env({"COMMKIT_TEST_INIT": f"file://{tmp / 'init'}", **(extra_env or {})})
    return _run(cmd, env, timeout)


def check(results, what: str) -> None:
    if isinstance(results, subprocess.CompletedProcess):
        results = [results]
    for i, r in enumerate(results):
        assert r.returncode == 0, f"{what}: process {i} exited with {r.returncode}; output:\n{r.stdout}"
