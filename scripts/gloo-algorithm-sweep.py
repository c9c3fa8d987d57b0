#!/usr/bin/env python3
"""Measures Gloo's all-reduce algorithms (COMMKIT_GLOO_ALGORITHM=ring|halving_doubling|bcube) with
commkit-bench under mpirun, per rank count, repeated with the algorithm order rotated between
repeats, and prints the median time per call and the ratios to ring as a Markdown table.

  scripts/gloo-algorithm-sweep.py --bench build-rel/bin/commkit-bench --ranks 2,3,4 --repeats 3 \\
      --out gloo-sweep.jsonl

This is what docs/gloo-algorithms.md's table and comm/backends/gloo/src/gloo_algorithm.cc's `auto`
thresholds come from. Noise on a shared 2-core machine is large: compare ratios, not absolutes.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ALGORITHMS = ["ring", "halving_doubling", "bcube"]


def run_one(args, ranks, algorithm, port):
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks),
           "-x", "MASTER_ADDR=127.0.0.1", "-x", f"MASTER_PORT={port}",
           "-x", f"COMMKIT_GLOO_ALGORITHM={algorithm}",
           args.bench, "allreduce", "-B", "gloo", "-b", args.min_bytes, "-e", args.max_bytes,
           "-f", str(args.factor), "-w", str(args.warmup), "-n", str(args.iters),
           "--out-of-place-only", "--no-progress", "--predict", "off", "--format", "json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=args.timeout)
    rows = []
    for line in out.stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        row = json.loads(line)
        row["algorithm"] = algorithm
        rows.append(row)
    return cmd, rows


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bench", required=True)
    p.add_argument("--ranks", default="2,3,4")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("-b", "--min-bytes", default="16")
    p.add_argument("-e", "--max-bytes", default="64M")
    p.add_argument("-f", "--factor", type=int, default=4)
    p.add_argument("-w", "--warmup", type=int, default=3)
    p.add_argument("-n", "--iters", type=int, default=20)
    p.add_argument("--timeout", type=int, default=600)
    p.add_argument("--out", default="gloo-sweep.jsonl")
    args = p.parse_args()

    rows = []
    port = 29800
    printed = False
    with open(args.out, "w") as f:
        for ranks in [int(r) for r in args.ranks.split(",")]:
            for rep in range(args.repeats):
                order = ALGORITHMS[rep % 3:] + ALGORITHMS[:rep % 3]  # rotate to spread drift
                for algorithm in order:
                    port += 1
                    cmd, got = run_one(args, ranks, algorithm, port)
                    if not printed:
                        print("# per run: " + " ".join(cmd), file=sys.stderr)
                        printed = True
                    for r in got:
                        r["repeat"] = rep
                        f.write(json.dumps(r) + "\n")
                    rows.extend(got)
                    print(f"# ranks={ranks} repeat={rep} {algorithm}: {len(got)} rows", file=sys.stderr)

    # median over repeats of the time per call, per (ranks, size, algorithm)
    table = {}
    per_repeat = {}
    for r in rows:
        per_repeat[(r["nranks"], r["size"], r["algorithm"], r["repeat"])] = r["time_us"]
        if r.get("wrong", 0):
            print(f"WRONG RESULTS: {r}", file=sys.stderr)
        table.setdefault((r["nranks"], r["size"], r["algorithm"]), []).append(r["time_us"])
    def ratio_range(ranks, size, algorithm):
        rs = [per_repeat[(ranks, size, algorithm, k)] / per_repeat[(ranks, size, "ring", k)]
              for k in range(args.repeats)
              if (ranks, size, algorithm, k) in per_repeat and (ranks, size, "ring", k) in per_repeat]
        return f"{min(rs):.2f}-{max(rs):.2f}" if rs else "-"

    print("| ranks | size | ring µs | halving-doubling µs | bcube µs | hd/ring (range) | bcube/ring (range) | best |")
    print("|---:|---:|---:|---:|---:|---:|---:|---|")
    for (ranks, size) in sorted({(k[0], k[1]) for k in table}):
        med = {a: statistics.median(table[(ranks, size, a)]) for a in ALGORITHMS if (ranks, size, a) in table}
        if len(med) < 3:
            continue
        best = min(med, key=med.get)
        print(f"| {ranks} | {size} | {med['ring']:.0f} | {med['halving_doubling']:.0f} | {med['bcube']:.0f} | "
              f"{med['halving_doubling'] / med['ring']:.2f} ({ratio_range(ranks, size, 'halving_doubling')}) | "
              f"{med['bcube'] / med['ring']:.2f} ({ratio_range(ranks, size, 'bcube')}) | {best} |")


if __name__ == "__main__":
    main()
