#!/usr/bin/env python3
"""CTest bench_peer_bench_smoke: scripts/peer-bench --quick on 2 ranks, one size of each collective,
with whichever peers are installed (nothing is downloaded). Checks that the table is written and that
every row carries a plausible, verified result: each peer program compared its output buffers with the
expected sums/gathers (#wrong == 0), busbw and time are positive and finite, and the core-placement
probe ran around the launches. Timing is not judged.
Exit 77 (skipped) when no peer library is installed at all.
Usage: peer_bench_smoke.py SOURCE_DIR COMMKIT_BENCH OUT_DIR
"""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

COLLECTIVES = ("allreduce", "allgather", "reduce_scatter")
SIZE = 64 << 10


def main() -> int:
    src, bench, out = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    # A previous run's results must not pass for this one's; its compiled peer programs (bin/) are kept.
    for name in ("peers.json", "peers.md", "runs.jsonl", "meta.json", "errors.json", "retried.json"):
        (out / name).unlink(missing_ok=True)
    cmd = [sys.executable, str(src / "scripts" / "peer-bench"), "--quick", "--ranks", "2", "--no-install",
           "--skip-if-no-peer", "--no-plots", "--commkit-bench", bench, "--out", str(out), "-b", str(SIZE),
           "-e", str(SIZE), "--timeout", "180"]
    print("running:", " ".join(cmd), flush=True)
    rc = subprocess.run(cmd).returncode
    if rc == 77:
        print("skipped: no peer library is installed (scripts/install-deps --peers installs MPICH, Intel MPI, oneCCL)")
        return 77
    problems = []
    if rc != 0:
        problems.append(f"peer-bench exited {rc} (0 expected)")
    result_path, md_path = out / "peers.json", out / "peers.md"
    if not result_path.exists() or not md_path.exists():
        print("FAIL: peers.json / peers.md not written;", "; ".join(problems))
        return 1
    result = json.loads(result_path.read_text())
    present = [p for p, state in result["meta"]["peers"].items() if state == "present"]
    missing = {p: state for p, state in result["meta"]["peers"].items() if state != "present"}
    print("peers present:", ", ".join(present) or "none", "| missing:", missing or "none")
    for e in result.get("errors", []):
        problems.append("run failed twice: " + e)
    for e in result.get("retried", []):
        print("note: failed once, passed when run again:", e)
    want = {"host", "raw-host"} | set(present)
    for coll in COLLECTIVES:
        rows = [e for e in result["summary"]["table"] if e["collective"] == coll and e["nranks"] == 2]
        if [e["size"] for e in rows] != [SIZE]:
            problems.append(f"{coll}: expected one row at {SIZE} B, got sizes {[e['size'] for e in rows]}")
            continue
        series = rows[0]["series"]
        for name in sorted(want - set(series)):
            problems.append(f"{coll}: no result for {name}")
        for name, s in series.items():
            bw, t = s["busbw_gbps"], s["time_us"]
            if not (math.isfinite(bw) and math.isfinite(t) and bw > 0 and t > 0 and bw < 10000):
                problems.append(f"{coll} {name}: implausible busbw {bw} GB/s / time {t} us")
            if s["wrong"] != 0 or not s["checked"]:
                problems.append(f"{coll} {name}: output not verified correct (wrong={s['wrong']}, checked={s['checked']})")
        if present and "best_peer" not in rows[0]:
            problems.append(f"{coll}: no best peer chosen")
        if "ratio_host_to_best_peer" in rows[0] and not rows[0]["ratio_host_to_best_peer"] > 0:
            problems.append(f"{coll}: ratio host / best peer is not positive")
    md = md_path.read_text()
    # Every launch is bracketed by a core-placement probe when commkit-topo sits beside commkit-bench.
    if (Path(bench).parent / "commkit-topo").exists() and len(os.sched_getaffinity(0)) >= 2:
        pl = result["meta"].get("placement")
        if not pl or pl["launches"] < 1 or not pl["fastest_ns"] > 0 or pl["slowest_ns"] < pl["fastest_ns"]:
            problems.append(f"no plausible core-placement probe recorded (meta.placement: {pl})")
        if "Core placement" not in md:
            problems.append("peers.md does not say how the cores were placed")
    for coll in COLLECTIVES:
        if f"## {coll}, 2 ranks" not in md:
            problems.append(f"peers.md lacks the {coll} table")
    if problems:
        print("FAIL:\n  " + "\n  ".join(problems))
        return 1
    print(f"ok: {len(present)} peer(s) and commkit, {len(COLLECTIVES)} collectives, every row verified")
    return 0


if __name__ == "__main__":
    sys.exit(main())
