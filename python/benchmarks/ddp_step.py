#!/usr/bin/env python3
"""DDP step time on CPU, backend="commkit" against gloo in the same job, and the per-call cost of the
torch.distributed glue (docs/pytorch.md has the numbers and how they were taken).

    PYTHONPATH=build/torch/python/pkg python python/benchmarks/ddp_step.py --ranks 2 4 --json out.json

Without RANK in the environment it starts the ranks itself (plain subprocesses, file:// init) for each
--ranks value and prints one table; with RANK set it is one rank.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def worker(args) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    import commkit

    torch.set_num_threads(1)
    dist.init_process_group("commkit", init_method=os.environ["COMMKIT_BENCH_INIT"],
                            rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    rank, world = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")

    def model():
        torch.manual_seed(0)
        layers = []
        for _ in range(args.layers):
            layers += [nn.Linear(args.width, args.width), nn.ReLU()]
        return nn.Sequential(*layers)

    x = torch.randn(args.batch, args.width)
    results = {"world": world, "params": sum(p.numel() for p in model().parameters())}
    view = args.bucket_view
    nets = {"commkit": DDP(model(), process_group=dist.group.WORLD, bucket_cap_mb=25, gradient_as_bucket_view=view),
            "gloo": DDP(model(), process_group=gloo, bucket_cap_mb=25, gradient_as_bucket_view=view)}
    times = {k: [] for k in nets}
    for step in range(args.warmup + args.steps):
        for name, net in nets.items():  # alternate, so both see the same machine state
            dist.barrier(group=gloo)
            t0 = time.perf_counter()
            net(x).sum().backward()
            for p in net.parameters():
                p.grad = None
            if step >= args.warmup:
                times[name].append(time.perf_counter() - t0)
    for name, ts in times.items():
        t = torch.tensor([statistics.median(ts)])
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=gloo)
        results[f"{name}_step_ms"] = t.item() * 1e3
    results["speedup"] = results["gloo_step_ms"] / results["commkit_step_ms"]

    if args.breakdown:
        results.update(breakdown(args, model, x, gloo))

    # Per-call cost of an 8-byte all_reduce: Python torch.distributed (commkit and gloo), the c10d
    # backend call from C++, and commkit's ProcessGroup directly (the glue is the difference).
    small = torch.zeros(2)
    for name, group in (("commkit", dist.group.WORLD), ("gloo", gloo)):
        for _ in range(200):
            dist.all_reduce(small, group=group)
        dist.barrier(group=gloo)
        t0 = time.perf_counter()
        for _ in range(args.calls):
            dist.all_reduce(small, group=group)
        results[f"{name}_python_allreduce_us"] = (time.perf_counter() - t0) / args.calls * 1e6
    dist.barrier(group=gloo)
    results.update({f"glue_{k}": v for k, v in commkit._glue_bench(iters=args.calls).items()})
    if rank == 0:
        print("RESULT " + json.dumps(results), flush=True)
    dist.destroy_process_group()


def breakdown(args, model, x, gloo) -> dict:
    """Where a DDP step's time goes: the same forward/backward without DDP (compute only), and the
    all-reduce of DDP's own gradient buckets alone, per backend (medians over --steps, max over ranks)."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import commkit

    sizes = []

    def record(state, bucket):  # DDP's buckets, in the order it reduces them
        sizes.append(bucket.buffer().numel())
        fut = torch.futures.Future()
        fut.set_result(bucket.buffer())
        return fut

    probe_net = DDP(model(), process_group=dist.group.WORLD, bucket_cap_mb=25)
    probe_net.register_comm_hook(None, record)
    for _ in range(2):  # DDP rebuilds its buckets after the first iteration: keep the second's
        sizes.clear()
        probe_net(x).sum().backward()
    plain = model()
    out = {"bucket_mb": [round(n * 4 / 2**20, 1) for n in sizes]}

    def median_max(fn):
        ts = []
        for step in range(args.warmup + args.steps):
            dist.barrier(group=gloo)
            t0 = time.perf_counter()
            fn()
            if step >= args.warmup:
                ts.append(time.perf_counter() - t0)
        t = torch.tensor([statistics.median(ts)])
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=gloo)
        return t.item() * 1e3

    def compute():
        plain(x).sum().backward()
        for p in plain.parameters():
            p.grad = None

    out["compute_ms"] = median_max(compute)
    buckets = [torch.ones(n) for n in sizes]
    for name, group in (("commkit", dist.group.WORLD), ("gloo", gloo)):
        def comm():
            works = [dist.all_reduce(b, group=group, async_op=True) for b in buckets]
            for w in works:
                w.wait()
        out[f"{name}_buckets_allreduce_ms"] = median_max(comm)
    # The backend's own cost at bucket size: the c10d call against commkit's ProcessGroup directly on
    # the same tensor (a copy in the backend would show as a difference of a copy's time).
    big = commkit._glue_bench(iters=args.steps, count=max(sizes))
    out["bucket_c10d_ms"], out["bucket_commkit_ms"] = big["backend_us"] / 1e3, big["commkit_us"] / 1e3
    # The memory traffic floor of one pass over the gradients on this machine: one copy of them.
    src, dst = torch.ones(sum(sizes)), torch.empty(sum(sizes))
    out["gradient_copy_ms"] = median_max(lambda: dst.copy_(src))
    return out


def launch(args) -> None:
    rows = []
    for world in args.ranks:
        with tempfile.TemporaryDirectory() as tmp:
            procs = []
            for r in range(world):
                env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(world), LOCAL_RANK=str(r),
                           OMP_NUM_THREADS="1", COMMKIT_BENCH_INIT=f"file://{tmp}/init")
                procs.append(subprocess.Popen([sys.executable, __file__, *sys.argv[1:]], env=env,
                                              stdout=subprocess.PIPE, text=True))
            outs = [p.communicate(timeout=args.timeout)[0] for p in procs]
            if any(p.returncode for p in procs):
                sys.exit(f"ddp_step: a rank failed at {world} ranks:\n" + "\n".join(outs))
            line = next(l for l in outs[0].splitlines() if l.startswith("RESULT "))
            rows.append(json.loads(line[len("RESULT "):]))
    print(f"{'ranks':>5} {'params':>10} {'gloo ms':>9} {'commkit ms':>10} {'speedup':>8} "
          f"{'py gloo us':>10} {'py commkit us':>13} {'c10d us':>8} {'commkit us':>10} {'glue us':>8}")
    for r in rows:
        print(f"{r['world']:>5} {r['params']:>10} {r['gloo_step_ms']:>9.1f} {r['commkit_step_ms']:>10.1f} "
              f"{r['speedup']:>7.2f}x {r['gloo_python_allreduce_us']:>10.1f} {r['commkit_python_allreduce_us']:>13.1f} "
              f"{r['glue_backend_us']:>8.2f} {r['glue_commkit_us']:>10.2f} {r['glue_glue_us']:>8.2f}")
    for r in rows:
        if "compute_ms" in r:
            print(f"breakdown at {r['world']} ranks: buckets {r['bucket_mb']} MB; compute only "
                  f"{r['compute_ms']:.1f} ms; bucket all-reduces alone: commkit {r['commkit_buckets_allreduce_ms']:.1f} ms, "
                  f"gloo {r['gloo_buckets_allreduce_ms']:.1f} ms; one copy of the gradients {r['gradient_copy_ms']:.1f} ms; "
                  f"one bucket through the c10d backend {r['bucket_c10d_ms']:.1f} ms, on commkit directly "
                  f"{r['bucket_commkit_ms']:.1f} ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    p.add_argument("--layers", type=int, default=6, help="Linear layers (width x width each)")
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--calls", type=int, default=5000, help="8-byte all_reduce calls for the glue numbers")
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--json", help="also write the rows here")
    p.add_argument("--bucket-view", action="store_true",
                   help="DDP(gradient_as_bucket_view=True) for both backends (no gradient copies into and out of buckets)")
    p.add_argument("--breakdown", action="store_true",
                   help="also time the step without DDP and the bucket all-reduces alone, per backend")
    args = p.parse_args()
    if "RANK" in os.environ:
        worker(args)
    else:
        launch(args)


if __name__ == "__main__":
    main()
