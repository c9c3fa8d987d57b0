#!/usr/bin/python3
"""Store traffic of ProcessGroup's mismatch check, old scheme (store path) vs new (on the communicator).

Old scheme (device backends before, and any backend that can neither reduce host int64 nor check on
its own communicator): per collective, every rank Sets "pg/<group>/fp/<seq>/<rank>", MultiGets the N
keys (parked on the server until all N exist) and Deletes its previous key. New scheme (NCCL,
Backend::ChecksMismatchOnCompletion): a 16-byte MAX all-reduce of [w, ~w] in the collective's own
ncclGroupStart/End; no store request on the happy path; the per-rank diff through the store only when
the fingerprints differ.

Requests and bytes are counted from the TcpStore wire format (comm/src/store/tcp_protocol.h: a frame
is a u32 length and a u8 op or status, strings are a u32 length and bytes, lists a u32 count). The
server's time per collective is measured by `commkit-store-bench --fingerprint ...` (the exact request
pattern on loopback); the model fits t(N) = a*N + b*N^2 to those measurements (least squares) and
extrapolates to the sizes no single machine can host. Without --bench-json it uses the measurements
recorded in docs/store-benchmarks.md.

    build/test/bin/commkit-store-bench --clients 64 --ops 200 --fingerprint 64 128 256 512 1024 --json > fp.json
    scripts/mismatch-store-model.py --bench-json fp1.json fp2.json fp3.json [--json]
"""
import argparse
import json
import statistics
import sys

VERSION = "1.0"

# commkit-store-bench --fingerprint 64 128 256 512 1024 (seconds per collective, median of 3 runs, Release
# build, 2-core VM, 2026-11-24), recorded in docs/store-benchmarks.md; replaced by --bench-json.
RECORDED = {64: 0.0070, 128: 0.0197, 256: 0.0583, 512: 0.1706, 1024: 0.6898}

FRAME = 4 + 1  # u32 length + u8 op (request) or status (reply)


def key_len(group, seq_digits, rank_digits):
    return len("pg/") + len(group) + len("/fp/") + seq_digits + 1 + rank_digits


def old_scheme(n, group, seq_digits, value_len):
    """Requests and bytes per rank per collective (both directions), keys read by the server."""
    rank_digits = len(str(n - 1))
    k = key_len(group, seq_digits, rank_digits)
    set_req = FRAME + (4 + k) + (4 + value_len)
    set_rep = FRAME
    mget_req = FRAME + 4 + n * (4 + k) + 8
    mget_rep = FRAME + 4 + n * (4 + value_len)
    del_req = FRAME + 4 + k
    del_rep = FRAME + 1
    return {
        "requests": 3,
        "bytes_sent": set_req + mget_req + del_req,
        "bytes_received": set_rep + mget_rep + del_rep,
        "keys_read_by_server": n,
    }


def fit(points):
    """Least squares t = a*N + b*N^2 through the origin."""
    s11 = sum(n * n for n, _ in points)
    s12 = sum(n ** 3 for n, _ in points)
    s22 = sum(n ** 4 for n, _ in points)
    r1 = sum(n * t for n, t in points)
    r2 = sum(n * n * t for n, t in points)
    det = s11 * s22 - s12 * s12
    if det == 0:
        raise SystemExit("need measurements at two or more rank counts to fit the model")
    a = (r1 * s22 - r2 * s12) / det
    b = (s11 * r2 - s12 * r1) / det
    return a, b


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bench-json", nargs="+", metavar="FILE",
                   help="commkit-store-bench --json outputs with a 'fingerprint' section (several runs: the median "
                        "per rank count)")
    p.add_argument("--ranks", type=int, nargs="+", default=[64, 256, 1024, 2048, 4096])
    p.add_argument("--group", default="world", help="process group name (part of every key)")
    p.add_argument("--seq-digits", type=int, default=6, help="digits of the sequence number (6: up to 999,999 collectives)")
    p.add_argument("--value-len", type=int, default=20, help="bytes of a fingerprint in decimal (int64: up to 20)")
    p.add_argument("--collectives-per-step", type=int, default=200,
                   help="collectives per training step, for the per-step column (default 200)")
    p.add_argument("--json", action="store_true", help="JSON output")
    p.add_argument("--version", action="version", version=f"%(prog)s {VERSION}")
    args = p.parse_args()

    if args.bench_json:
        runs = {}
        for path in args.bench_json:
            try:
                with open(path, encoding="utf-8") as f:
                    bench = json.load(f)
                for r in bench["fingerprint"]:
                    runs.setdefault(int(r["ranks"]), []).append(float(r["seconds_per_collective"]))
            except (OSError, ValueError, KeyError, TypeError) as e:
                print(f"{path}: not commkit-store-bench --json output with a 'fingerprint' section: {e}",
                      file=sys.stderr)
                return 2
        points = sorted((n, statistics.median(ts)) for n, ts in runs.items())
    else:
        points = sorted(RECORDED.items())
    if len(points) < 2:
        print("no measurements: run commkit-store-bench --fingerprint 64 256 1024 --json and pass --bench-json",
              file=sys.stderr)
        return 2
    a, b = fit(points)
    measured = dict(points)
    rows = []
    for n in args.ranks:
        o = old_scheme(n, args.group, args.seq_digits, args.value_len)
        t = measured.get(n, a * n + b * n * n)
        rows.append({
            "ranks": n,
            "old": {
                "requests_per_rank": o["requests"],
                "bytes_per_rank": o["bytes_sent"] + o["bytes_received"],
                "requests_job": o["requests"] * n,
                "bytes_job": (o["bytes_sent"] + o["bytes_received"]) * n,
                "keys_read_job": o["keys_read_by_server"] * n,
                "server_seconds_per_collective": t,
                "measured": n in measured,
                "server_seconds_per_step": t * args.collectives_per_step,
                "max_collectives_per_second": 1.0 / t if t > 0 else None,
            },
            "new": {"requests_per_rank": 0, "bytes_per_rank": 0, "requests_job": 0, "bytes_job": 0,
                    "server_seconds_per_collective": 0.0,
                    "on_communicator": "one 16-byte (2 x uint64) MAX all-reduce fused into the collective's NCCL group"},
        })
    out = {"model": {"t(N)": "a*N + b*N^2", "a_seconds": a, "b_seconds": b, "fitted_to": points},
           "collectives_per_step": args.collectives_per_step, "rows": rows}
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"store path fitted to {len(points)} measurements: t(N) = {a * 1e6:.1f} us * N + {b * 1e9:.1f} ns * N^2")
    print(f"{'ranks':>6} {'old req/rank':>12} {'old B/rank':>11} {'old req/job':>11} {'old MB/job':>10} "
          f"{'keys read':>11} {'server s/coll':>13} {'s/step':>9} {'coll/s max':>10}  new (store)")
    for r in rows:
        o = r["old"]
        mark = "" if o["measured"] else "*"
        print(f"{r['ranks']:>6} {o['requests_per_rank']:>12} {o['bytes_per_rank']:>11,} {o['requests_job']:>11,} "
              f"{o['bytes_job'] / 1e6:>10.1f} {o['keys_read_job']:>11,} {o['server_seconds_per_collective']:>12.4f}{mark:1} "
              f"{o['server_seconds_per_step']:>9.2f} {o['max_collectives_per_second']:>10.1f}  0 req, 0 B")
    print("* extrapolated by the fit; others measured")
    return 0


if __name__ == "__main__":
    sys.exit(main())
