"""One rank of the training tests: the same model trained with DDP (plain, with a communication hook)
and FSDP over backend="commkit" and over a gloo group in the same job; the parameters must agree.
Two ranks: bit-identical (one addition per element, which is commutative). More ranks: gloo's ring
adds in another order than commkit, so within a relative 1e-5 (absolute 1e-6); with the fp16
compression hook (gradients summed in float16) within a relative 1e-3 (absolute 1e-5)."""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

import commkit  # registers the backend

STEPS = int(os.environ.get("COMMKIT_TEST_STEPS", "5"))

init = os.environ.get("COMMKIT_TEST_INIT", "env://")
dist.init_process_group("commkit", init_method=init, rank=int(os.environ["RANK"]),
                        world_size=int(os.environ["WORLD_SIZE"]))
rank, world = dist.get_rank(), dist.get_world_size()
gloo = dist.new_group(backend="gloo")
exact = world == 2


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))


def batches():
    g = torch.Generator().manual_seed(1000 + rank)
    return [(torch.randn(16, 32, generator=g), torch.randn(16, 4, generator=g)) for _ in range(STEPS)]


def train(net, params=None):
    opt = torch.optim.SGD(params if params is not None else net.parameters(), lr=0.05, momentum=0.9)
    for x, y in batches():
        opt.zero_grad()
        nn.functional.mse_loss(net(x), y).backward()
        opt.step()
    return net


def compare(name, a, b, rtol=1e-5, atol=1e-6):
    worst = 0.0
    for (n, p), q in zip(a, b):
        p, q = p.detach(), q.detach()
        worst = max(worst, (p - q).abs().max().item())
        ok = torch.equal(p, q) if exact else torch.allclose(p, q, rtol=rtol, atol=atol)
        if not ok:
            raise AssertionError(f"rank {rank}: {name}: parameter {n} differs between commkit and gloo "
                                 f"(max abs diff {(p - q).abs().max().item():.3g})")
    # Every rank holds the same parameters (DDP's invariant).
    flat = torch.cat([p.detach().reshape(-1) for _, p in a])
    ref = flat.clone()
    dist.broadcast(ref, src=0)
    assert torch.equal(flat, ref), f"rank {rank}: {name}: ranks disagree"
    print(f"rank {rank}: {name} parity ok (max abs diff {worst:.3g}, {'exact' if exact else f'rtol {rtol:g}'})",
          flush=True)


# DDP, default allreduce.
a = train(DDP(model(), process_group=dist.group.WORLD))
b = train(DDP(model(), process_group=gloo))
compare("ddp", list(a.module.named_parameters()), [p for _, p in b.module.named_parameters()])

# DDP with communication hooks (async all_reduce + future.then underneath).
for hook in (default_hooks.allreduce_hook, default_hooks.fp16_compress_hook):
    ca, cb = DDP(model(), process_group=dist.group.WORLD), DDP(model(), process_group=gloo)
    ca.register_comm_hook(dist.group.WORLD, hook)
    cb.register_comm_hook(gloo, hook)
    train(ca)
    train(cb)
    fp16 = hook is default_hooks.fp16_compress_hook
    compare(f"ddp+{hook.__name__}", list(ca.module.named_parameters()), [p for _, p in cb.module.named_parameters()],
            rtol=1e-3 if fp16 else 1e-5, atol=1e-5 if fp16 else 1e-6)

# async_op collectives interleaved with computation.
w = dist.all_reduce(t := torch.full((1 << 18,), float(rank)), async_op=True)
_ = torch.randn(256, 256) @ torch.randn(256, 256)
w.wait()
assert torch.equal(t, torch.full((1 << 18,), float(sum(range(world))))), "async all_reduce"
print(f"rank {rank}: async_op ok", flush=True)

# FSDP2 (fully_shard) on CPU: all_gather_into_tensor and reduce_scatter_tensor underneath.
if os.environ.get("COMMKIT_TEST_FSDP", "1") == "1":
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    def fsdp(group):
        net = model()
        mesh = DeviceMesh.from_group(group, "cpu")
        for layer in net:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(net, mesh=mesh)
        train(net)
        return [(n, p.full_tensor()) for n, p in net.named_parameters()]

    fa = fsdp(dist.group.WORLD)
    fb = fsdp(gloo)
    compare("fsdp2", fa, [p for _, p in fb])

dist.destroy_process_group()
print(f"rank {rank}: done", flush=True)
sys.exit(0)
