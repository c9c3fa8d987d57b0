"""DDP (plain and with communication hooks), async_op and FSDP2 on backend="commkit" against gloo, at 2
and 4 ranks, under torchrun (env://) and under commkit-run (file://; commkit-run's own store holds
MASTER_PORT)."""

import pytest

from _launch import check, commkit_run, commkit_run_binary, torchrun


def _assert_parity(out: str, world: int) -> None:
    for name in ("ddp", "ddp+allreduce_hook", "ddp+fp16_compress_hook", "fsdp2"):
        assert out.count(f"{name} parity ok") >= world, f"{name} parity missing:\n{out}"
    assert out.count("async_op ok") >= world, out


@pytest.mark.parametrize("world", [2, 4])
def test_ddp_under_torchrun(world):
    r = torchrun("_ddp_worker.py", world, [])
    check(r, f"torchrun {world} ranks")
    _assert_parity(r.stdout, world)


@pytest.mark.parametrize("world", [2, 4])
def test_ddp_under_commkit_run(tmp_path, world):
    if commkit_run_binary() is None:
        pytest.skip("commkit-run not built (COMMKIT_BIN_DIR)")
    r = commkit_run("_ddp_worker.py", world, [], tmp_path)
    check(r, f"commkit-run {world} ranks")
    _assert_parity(r.stdout, world)
