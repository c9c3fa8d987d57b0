#!/usr/bin/env python3
"""Host cost of torch.distributed.all_reduce on CUDA tensors: backend="commkit" against "nccl" in one
process at world size 1 (one GPU), interleaved rounds, medians (docs/gpu-validation.md has numbers).

    PYTHONPATH=<pkg> python python/benchmarks/cuda_allreduce.py [--sizes 8,1048576] [--iters 300] [--json F]

At world size 1 NCCL's in-place all-reduce moves no data, so `issue_us` (the time to return from
all_reduce) and `step_us` (issue plus the stream running dry, per call) measure each backend's
per-call overhead, which is what commkit adds on top of NCCL.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="8,4096,1048576,67108864", help="bytes, comma-separated")
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()

    import torch
    import torch.distributed as dist

    import commkit  # noqa: F401  (registers backend "commkit")

    if not torch.cuda.is_available():
        raise SystemExit("cuda_allreduce: no CUDA device")
    torch.cuda.set_device(0)
    init = "file://" + os.path.join(tempfile.mkdtemp(), "init")
    dist.init_process_group("nccl", init_method=init, rank=0, world_size=1)
    groups = {"nccl": dist.group.WORLD, "commkit": dist.new_group(backend="commkit")}
    rows = []
    print(f"{'bytes':>10} {'nccl issue':>11} {'commkit issue':>14} {'diff':>7} {'nccl step':>10} {'commkit step':>13} {'ratio':>6}")
    for size in (int(s) for s in args.sizes.split(",")):
        t = torch.ones(max(1, size // 4), device="cuda")
        for g in groups.values():
            for _ in range(20):
                dist.all_reduce(t, group=g)
        torch.cuda.synchronize()
        issue = {n: [] for n in groups}
        step = {n: [] for n in groups}
        for _ in range(args.rounds):
            for name, g in groups.items():
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(args.iters):
                    dist.all_reduce(t, group=g)
                t1 = time.perf_counter()
                torch.cuda.synchronize()
                t2 = time.perf_counter()
                issue[name].append((t1 - t0) / args.iters * 1e6)
                step[name].append((t2 - t0) / args.iters * 1e6)
        assert torch.equal(t, torch.ones_like(t)), "in-place all-reduce at world size 1 changed the tensor"
        m = {k: {n: statistics.median(v[n]) for n in groups} for k, v in (("issue", issue), ("step", step))}
        row = {"bytes": size, "iters": args.iters, "rounds": args.rounds,
               "issue_us": m["issue"], "step_us": m["step"],
               "issue_diff_us": m["issue"]["commkit"] - m["issue"]["nccl"],
               "step_ratio": m["step"]["commkit"] / m["step"]["nccl"]}
        rows.append(row)
        print(f"{size:>10} {m['issue']['nccl']:>11.2f} {m['issue']['commkit']:>14.2f} {row['issue_diff_us']:>7.2f} "
              f"{m['step']['nccl']:>10.2f} {m['step']['commkit']:>13.2f} {row['step_ratio']:>6.2f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"schema": "commkit.cuda-allreduce/1", "device": torch.cuda.get_device_name(0),
                       "torch": torch.__version__, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                       "rows": rows}, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
