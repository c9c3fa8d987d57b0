"""World size 1 with CUDA tensors on backend="commkit" (commkit's NCCL backend underneath)."""

import os

import torch
import torch.distributed as dist

import commkit

dist.init_process_group("commkit", init_method=os.environ["COMMKIT_TEST_INIT"], rank=0, world_size=1)
dev = torch.device("cuda", 0)
torch.cuda.set_device(dev)
t = torch.arange(8, dtype=torch.float32, device=dev)
dist.all_reduce(t)
assert torch.equal(t.cpu(), torch.arange(8, dtype=torch.float32)), t
for dtype in (torch.float16, torch.bfloat16, torch.int64):
    x = torch.ones(1000, dtype=dtype, device=dev)
    dist.all_reduce(x, op=dist.ReduceOp.MAX)
    assert torch.equal(x, torch.ones(1000, dtype=dtype, device=dev))
out = torch.empty(8, device=dev)
dist.all_gather_into_tensor(out, torch.full((8,), 3.0, device=dev))
assert torch.equal(out.cpu(), torch.full((8,), 3.0))
b = torch.full((4,), 5.0, device=dev)
dist.broadcast(b, src=0)
work = dist.all_reduce(big := torch.ones(1 << 20, device=dev), async_op=True)
fut = work.get_future()
work.wait()
assert fut.wait()[0].sum().item() == float(1 << 20)
v = torch.ones(4, 6, device=dev)[:, ::2]
dist.all_reduce(v)
torch.cuda.synchronize()
info = commkit.backend_info()
assert info["cuda"] == "nccl", info
print("cuda ok", info, flush=True)
dist.destroy_process_group()
