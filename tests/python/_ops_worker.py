"""One rank of the operation tests: every torch.distributed operation on backend="commkit", checked
against values each rank can compute itself. Usage: _ops_worker.py ops|mismatch|failed_work|sigterm|dead."""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import commkit  # registers the backend

mode = sys.argv[1] if len(sys.argv) > 1 else "ops"
rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
timeout = timedelta(seconds=float(os.environ.get("COMMKIT_TEST_TIMEOUT_S", "60")))
dist.init_process_group("commkit", init_method=os.environ.get("COMMKIT_TEST_INIT", "env://"), rank=rank,
                        world_size=world, timeout=timeout)
R = torch.arange(world, dtype=torch.float64)  # the ranks, for expected values

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int8, torch.uint8, torch.int32, torch.int64]


def eq(got, want, what):
    if got.dtype.is_floating_point:
        ok = torch.allclose(got.double(), want.double(), rtol=1e-2 if got.element_size() == 2 else 1e-6, atol=1e-3)
    else:
        ok = torch.equal(got, want.to(got.dtype))
    if not ok:
        raise AssertionError(f"rank {rank}: {what}: got {got.tolist()} want {want.tolist()}")


def value(r, dtype, n=5):
    # Small positive values every dtype holds exactly.
    return (torch.arange(n, dtype=torch.float64) + r + 1).to(dtype)


def check_allreduce():
    for dtype in FLOATS + INTS:
        ops = [dist.ReduceOp.SUM, dist.ReduceOp.MIN, dist.ReduceOp.MAX, dist.ReduceOp.PRODUCT]
        if dtype.is_floating_point:
            ops.append(dist.ReduceOp.AVG)
        else:
            ops += [dist.ReduceOp.BAND, dist.ReduceOp.BOR, dist.ReduceOp.BXOR]
        for op in ops:
            t = value(rank, dtype)
            dist.all_reduce(t, op=op)
            inputs = [value(r, torch.int64 if not dtype.is_floating_point else torch.float64) for r in range(world)]
            if op == dist.ReduceOp.SUM:
                want = sum(inputs)
            elif op == dist.ReduceOp.AVG:
                want = sum(inputs) / world
            elif op == dist.ReduceOp.MIN:
                want = torch.stack(inputs).min(0).values
            elif op == dist.ReduceOp.MAX:
                want = torch.stack(inputs).max(0).values
            elif op == dist.ReduceOp.PRODUCT:
                want = torch.stack(inputs).prod(0)
            else:
                want = inputs[0].clone()
                for x in inputs[1:]:
                    want = want & x if op == dist.ReduceOp.BAND else want | x if op == dist.ReduceOp.BOR else want ^ x
            if not dtype.is_floating_point:
                want = want.to(dtype)  # wraps like the integer type does
            eq(t, want, f"all_reduce {op} {dtype}")
    # PREMUL_SUM: each input multiplied by the factor before summing.
    t = value(rank, torch.float32)
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
    eq(t, sum(value(r, torch.float64) for r in range(world)) * 0.5, "all_reduce PREMUL_SUM")
    # bool: SUM is logical or, PRODUCT logical and.
    b = torch.tensor([rank == 0, True, False])
    dist.all_reduce(b, op=dist.ReduceOp.SUM)
    assert b.tolist() == [True, True, False], b
    # complex SUM as pairs of reals.
    c = torch.tensor([1 + 2j, rank + 0j], dtype=torch.complex64)
    dist.all_reduce(c)
    assert torch.allclose(c, torch.tensor([world * (1 + 2j), float(R.sum()) + 0j], dtype=torch.complex64)), c


def check_noncontiguous():
    base = torch.full((4, 6), float(rank + 1))
    view = base[:, ::2]  # not contiguous
    assert not view.is_contiguous()
    dist.all_reduce(view)
    eq(view, torch.full((4, 3), float(R.sum() + world)), "all_reduce of a non-contiguous view")
    eq(base[:, 1::2], torch.full((4, 3), float(rank + 1)), "the view's neighbours stay untouched")
    t = torch.full((3, 4), float(rank)).t()
    dist.broadcast(t, src=world - 1)
    eq(t, torch.full((4, 3), float(world - 1)), "broadcast into a transposed tensor")


def check_coalesced():
    ts = [value(rank, torch.float32, n) for n in (1, 7, 3)]
    work = dist.all_reduce_coalesced(ts, async_op=True)
    work.wait()
    for n, t in zip((1, 7, 3), ts):
        eq(t, sum(value(r, torch.float64, n) for r in range(world)), "all_reduce_coalesced")


def check_allgather():
    for dtype in [torch.float32, torch.bfloat16, torch.int64, torch.int16, torch.complex64, torch.bool]:
        x = (torch.arange(4) + 10 * rank).to(dtype) if dtype != torch.bool else torch.tensor([rank % 2 == 0] * 4)
        out = torch.empty(world * 4, dtype=dtype)
        dist.all_gather_into_tensor(out, x)
        want = torch.cat([(torch.arange(4) + 10 * r).to(dtype) if dtype != torch.bool else torch.tensor([r % 2 == 0] * 4)
                          for r in range(world)])
        assert torch.equal(out, want), (dtype, out, want)
    outs = [torch.empty(3) for _ in range(world)]
    dist.all_gather(outs, torch.full((3,), float(rank)))
    for r, o in enumerate(outs):
        eq(o, torch.full((3,), float(r)), "all_gather list")
    # Uneven sizes (allgatherv underneath).
    outs = [torch.empty(r + 1) for r in range(world)]
    dist.all_gather(outs, torch.full((rank + 1,), float(rank)))
    for r, o in enumerate(outs):
        eq(o, torch.full((r + 1,), float(r)), "all_gather of uneven tensors")
    # Coalesced form.
    outs = [torch.empty(world * 2), torch.empty(world * 3, dtype=torch.int32)]
    ins = [torch.full((2,), float(rank)), torch.full((3,), rank, dtype=torch.int32)]
    with dist._coalescing_manager(async_ops=True) as cm:
        for o, i in zip(outs, ins):
            dist.all_gather_into_tensor(o, i)
    cm.wait()
    eq(outs[0], R.repeat_interleave(2), "all_gather_into_tensor coalesced")
    eq(outs[1], R.repeat_interleave(3), "all_gather_into_tensor coalesced (int32)")
    # all_gather_coalesced: a list of differently shaped tensors (one empty), outputs[r][i] from rank r.
    shapes = [(1,), (2, 2), (0,), (3, 3, 3)]
    ins = [torch.full(s, float(rank + i)) for i, s in enumerate(shapes)]
    outs = [[torch.empty(s) for s in shapes] for _ in range(world)]
    dist.all_gather_coalesced(outs, ins)
    for r in range(world):
        for i, s in enumerate(shapes):
            eq(outs[r][i], torch.full(s, float(r + i)), f"all_gather_coalesced output {r}/{i}")


def check_reduce_scatter():
    inp = torch.arange(world * 3, dtype=torch.float32) + rank
    out = torch.empty(3)
    dist.reduce_scatter_tensor(out, inp)
    eq(out, sum(torch.arange(world * 3, dtype=torch.float64) + r for r in range(world))[rank * 3:rank * 3 + 3],
       "reduce_scatter_tensor")
    dist.reduce_scatter_tensor(out, inp, op=dist.ReduceOp.AVG)
    eq(out, (torch.arange(world * 3, dtype=torch.float64) + R.mean())[rank * 3:rank * 3 + 3], "reduce_scatter AVG")
    ins = [torch.full((2,), float(rank + p)) for p in range(world)]
    out = torch.empty(2)
    dist.reduce_scatter(out, ins)
    eq(out, torch.full((2,), float(R.sum() + world * rank)), "reduce_scatter list")
    ins = [torch.full((p + 1,), 1.0) for p in range(world)]  # uneven (reduce_scatter_v underneath)
    out = torch.empty(rank + 1)
    dist.reduce_scatter(out, ins)
    eq(out, torch.full((rank + 1,), float(world)), "reduce_scatter of uneven tensors")


def check_rooted():
    for root in range(world):
        t = torch.full((5,), float(rank))
        dist.broadcast(t, src=root)
        eq(t, torch.full((5,), float(root)), "broadcast")
        t = torch.full((5,), float(rank + 1))
        dist.reduce(t, dst=root, op=dist.ReduceOp.SUM)
        want = float(R.sum() + world) if rank == root else float(rank + 1)
        eq(t, torch.full((5,), want), "reduce (non-roots keep their input)")
        gl = [torch.empty(2) for _ in range(world)] if rank == root else None
        dist.gather(torch.full((2,), float(rank)), gl, dst=root)
        if rank == root:
            for r, g in enumerate(gl):
                eq(g, torch.full((2,), float(r)), "gather")
        out = torch.empty(3)
        sl = [torch.full((3,), float(10 * r)) for r in range(world)] if rank == root else None
        dist.scatter(out, sl, src=root)
        eq(out, torch.full((3,), float(10 * rank)), "scatter")
    objs = [None] * world
    dist.all_gather_object(objs, {"rank": rank})
    assert objs == [{"rank": r} for r in range(world)], objs


def check_alltoall():
    inp = torch.arange(world * 2, dtype=torch.float32) + 100 * rank
    out = torch.empty(world * 2)
    dist.all_to_all_single(out, inp)
    want = torch.cat([torch.arange(rank * 2, rank * 2 + 2, dtype=torch.float64) + 100 * r for r in range(world)])
    eq(out, want, "all_to_all_single")
    # Uneven splits: rank r sends p+1 rows of 2 to rank p.
    in_splits = [p + 1 for p in range(world)]
    out_splits = [rank + 1] * world
    inp = torch.full((sum(in_splits), 2), float(rank))
    out = torch.empty(sum(out_splits), 2)
    dist.all_to_all_single(out, inp, out_splits, in_splits)
    eq(out, torch.cat([torch.full((rank + 1, 2), float(r)) for r in range(world)]), "all_to_all_single with splits")
    outs = [torch.empty(r + 1) for r in range(world)]
    ins = [torch.full((rank + 1,), float(rank * 10 + p)) for p in range(world)]
    dist.all_to_all(outs, ins)
    for r, o in enumerate(outs):
        eq(o, torch.full((r + 1,), float(r * 10 + rank)), "all_to_all list")


def check_p2p():
    if world < 2:
        return
    peer = rank ^ 1
    if peer >= world:
        return
    # Both peers send first, with two tags, then receive in the same order.
    a, b = torch.full((4,), float(rank)), torch.full((1000,), float(rank * 2))
    w1 = dist.isend(a, peer, tag=1)
    w2 = dist.isend(b, peer, tag=2)
    ra, rb = torch.empty(4), torch.empty(1000)
    dist.recv(ra, peer, tag=1)
    dist.recv(rb, peer, tag=2)
    w1.wait()
    w2.wait()
    eq(ra, torch.full((4,), float(peer)), "recv tag 1")
    eq(rb, torch.full((1000,), float(peer * 2)), "recv tag 2")
    ops = [dist.P2POp(dist.isend, torch.full((3,), float(rank)), peer),
           dist.P2POp(dist.irecv, rx := torch.empty(3), peer)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    eq(rx, torch.full((3,), float(peer)), "batch_isend_irecv")


def check_async():
    big = torch.full((1 << 20,), float(rank))  # 4 MiB: runs on commkit's worker, not inline
    work = dist.all_reduce(big, async_op=True)
    fut = work.get_future()
    chained = fut.then(lambda f: f.value()[0] * 2)
    work.wait()
    assert isinstance(work, dist.Work) and work.is_completed() and work.is_success()
    assert work.exception() is None, work.exception()
    eq(big[:4], torch.full((4,), float(R.sum())), "async all_reduce")
    eq(chained.wait()[:4], torch.full((4,), float(2 * R.sum())), "future.then")
    # A future completes without anyone calling wait() on the Work.
    w = dist.all_reduce(torch.ones(1 << 20), async_op=True)
    deadline = time.time() + 30
    while not w.is_completed() and time.time() < deadline:
        time.sleep(0.001)
    assert w.is_completed()
    fut = dist.all_reduce(torch.ones(8), async_op=True).get_future()
    eq(fut.wait()[0], torch.full((8,), float(world)), "future of a small (inline) all_reduce")
    dist.barrier()
    info = commkit.backend_info()
    assert info["cpu"] == os.environ.get("COMMKIT_TORCH_HOST_BACKEND", "host"), info


def check_refusals():
    try:
        dist.all_reduce(torch.ones(2, dtype=torch.float32), op=dist.ReduceOp.BAND)
    except (ValueError, NotImplementedError, RuntimeError) as e:
        assert "commkit" in str(e), e
    else:
        raise AssertionError("BAND on float32 was not refused")
    try:
        dist.all_gather_into_tensor(torch.empty(world * 3 + 1), torch.ones(3))
    except (ValueError, RuntimeError) as e:
        assert "commkit" in str(e), e
    else:
        raise AssertionError("a wrongly sized all_gather_into_tensor was not refused")
    dist.barrier()


if mode == "ops":
    for check in [check_allreduce, check_noncontiguous, check_coalesced, check_allgather, check_reduce_scatter,
                  check_rooted, check_alltoall, check_p2p, check_async, check_refusals]:
        check()
        print(f"rank {rank}: {check.__name__} ok", flush=True)
elif mode == "mismatch":
    # Rank 0 reduces 4 elements, the others 5: every rank gets the per-rank diff.
    try:
        dist.all_reduce(torch.ones(4 if rank == 0 else 5))
    except dist.DistBackendError as e:
        msg = str(e)
        print(msg, flush=True)
        assert "Mismatch" in msg and "rank 0:" in msg and "rank 1:" in msg, msg
        print(f"rank {rank}: mismatch reported", flush=True)
    else:
        raise AssertionError("mismatched all_reduce did not raise")
    os._exit(0)  # the group's state after a mismatch is not worth a clean shutdown
elif mode == "failed_work":
    # An async all_reduce that fails (rank 0 reduces 4 elements, the others 5): wait() raises, and
    # exception() returns the same DistBackendError instead of raising.
    work = None
    try:
        work = dist.all_reduce(torch.ones(4 if rank == 0 else 5), async_op=True)
        work.wait()
    except dist.DistBackendError as e:
        raised = str(e)
    else:
        raise AssertionError("mismatched all_reduce did not raise")
    assert work is not None, "the mismatch was raised at the call, not by the Work: " + raised
    assert work.is_completed() and not work.is_success()
    exc = work.exception()
    assert isinstance(exc, dist.DistBackendError), repr(exc)
    assert str(exc) == raised, (str(exc), raised)
    assert "Mismatch" in str(exc) and "count=4" in str(exc) and "count=5" in str(exc), str(exc)
    print(f"rank {rank}: exception() returned {type(exc).__name__}", flush=True)
    os._exit(0)
elif mode == "sigterm":
    # Stopped with SIGTERM while its group's threads run (as torchrun stops a job): the rank must die
    # of the signal at once, not run exit handlers from a library's signal handler and hang.
    dist.all_reduce(torch.ones(4))
    with open(os.environ["COMMKIT_TEST_READY"], "w") as f:
        f.write("ready")
    time.sleep(120)
    raise AssertionError("SIGTERM did not stop the rank")
elif mode == "dead":
    dist.all_reduce(torch.ones(4))
    if rank == world - 1:
        os._exit(0)  # dies without a word
    try:
        dist.all_reduce(torch.ones(4))
    except dist.DistBackendError as e:
        msg = str(e)
        print(msg, flush=True)
        assert f"{world - 1}" in msg and ("never reached" in msg or "stopped responding" in msg), msg
        print(f"rank {rank}: dead rank named", flush=True)
    else:
        raise AssertionError("all_reduce with a dead rank did not raise")
    os._exit(0)

dist.destroy_process_group()
print(f"rank {rank}: done", flush=True)
