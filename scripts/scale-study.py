#!/usr/bin/python3
"""Scaling study for commkit-bench: sweeps rank counts, writes plots and a Markdown report.

For each rank count N in --ranks, runs one commkit-bench sweep (mpirun when available, so that the
host, gloo and mpi backends and the raw MPI baseline are measured in the same run; else --local N
threads, every backend of --backends but mpi) and collects the JSON lines. Then writes into --out:
  results.jsonl           every measurement (commkit-bench --format json rows, plus "run" = N; each
                          row's "reproduce" is the command commkit-bench reports for it)
  busbw_vs_size.svg/.png  bus bandwidth vs size, one line per rank count and backend (colour and
                          marker name the backend, the line style the rank count)
  efficiency.svg/.png     busbw(N) / busbw(reference) per size (reference: predictions, else N=2,
                          which is then the 1.0 line itself and not drawn again)
  predicted_vs_measured.svg/.png
  report.md               summary tables, overhead vs raw MPI, and the command that reproduces it

Predictions: commkit-bench attaches the topology cost model's busbw to every all-reduce row
(pred_busbw_gbps, --predict measure); those are used unless --predictions FILE gives others: JSON
{"model": "...", "predictions": [{"backend": "*",
"collective": "allreduce", "nranks": 2, "size": 1024, "busbw_gbps": 1.2}, ...]} (e.g. from the topology
cost model). Without either, a ring alpha-beta model (Hockney) fitted to the N=2 measurements of each backend
predicts the other rank counts: t = 2(N-1) alpha + 2(N-1)/N * size * beta (allreduce).
"""
import argparse
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
from collections import defaultdict


def run_sweep(args, n):
    common = [args.bench, args.collective, "-b", args.minbytes, "-e", args.maxbytes, "-f", str(args.stepfactor),
              "-w", str(args.warmup), "-n", str(args.iters), "--format", "json", "--no-progress",
              "--out-of-place-only", "--mismatch-check", str(args.mismatch_check)]
    if args.launcher == "mpirun":
        backends = args.backends
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n), "-x", "MASTER_ADDR=127.0.0.1",
               "-x", f"MASTER_PORT={args.port + n}"] + common + ["--compare", backends]
        if args.raw:
            cmd += ["--raw", "mpi"]
    else:
        # Threads in one process: every backend but mpi (which needs mpirun).
        local = ",".join(b for b in args.backends.split(",") if b and b != "mpi") or "host"
        cmd = common + ["--local", str(n), "--compare", local]
    print("+", shlex.join(cmd), file=sys.stderr)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=args.timeout)
    rows = []
    for line in out.stdout.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            row["run"] = n
            rows.append(row)
    return rows, shlex.join(cmd)


def bus_factor(collective, n):
    if n <= 0:
        return 0.0
    if collective == "allreduce":
        return 2.0 * (n - 1) / n
    if collective in ("allgather", "reduce_scatter", "alltoall"):
        return (n - 1) / n
    return 1.0


def fit_alpha_beta(points):
    """Least squares t = a + b * x over (x, t) points; returns (a, b) clamped at >= 0."""
    if len(points) < 2:
        return None
    xs = [p[0] for p in points]
    ts = [p[1] for p in points]
    mx, mt = sum(xs) / len(xs), sum(ts) / len(ts)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return None
    b = sum((x - mx) * (t - mt) for x, t in zip(xs, ts)) / sxx
    a = mt - b * mx
    return max(a, 0.0), max(b, 0.0)


def model_predictions(rows, collective):
    """The topology cost model's busbw that commkit-bench --predict attached to each all-reduce row."""
    preds, seen = [], set()
    for r in rows:
        if r.get("collective") != collective or not r.get("pred_busbw_gbps"):
            continue
        key = (r["backend"], r["nranks"], r["size"])
        if key in seen:
            continue
        seen.add(key)
        preds.append({"backend": r["backend"], "collective": collective, "nranks": r["nranks"], "size": r["size"],
                      "busbw_gbps": r["pred_busbw_gbps"], "algorithm": r.get("pred_algorithm", "")})
    return {"model": "topology cost model (alpha-beta from this host's memcpy and TCP loopback, "
                     "commkit-bench --predict measure)", "predictions": preds}


def fitted_predictions(rows, collective, ranks):
    """Ring alpha-beta model fitted on the N=2 rows of each backend."""
    preds = []
    by_backend = defaultdict(list)
    for r in rows:
        if r["nranks"] == 2:
            # Per-step model for 2 ranks: t = 2*1*alpha + 2*(1/2) * size * beta = 2 alpha + size beta
            by_backend[r["backend"]].append((r["size"], r["time_us"] * 1e-6))
    for backend, pts in by_backend.items():
        fit = fit_alpha_beta(pts)
        if fit is None:
            continue
        a2, b = fit  # a2 = 2 alpha
        alpha = a2 / 2
        for n in ranks:
            if n < 2:
                continue
            for size in sorted({p[0] for p in pts}):
                t = 2 * (n - 1) * alpha + 2.0 * (n - 1) / n * size * b
                if t > 0:
                    preds.append({"backend": backend, "collective": collective, "nranks": n, "size": size,
                                  "busbw_gbps": size / t / 1e9 * bus_factor(collective, n)})
    return {"model": "ring alpha-beta fitted to the N=2 measurements (fallback; no --predictions given)",
            "predictions": preds}


BACKEND_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]
BACKEND_MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
RANK_LINESTYLES = ["-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 3)), (0, (8, 2)), (0, (3, 1, 3, 5))]


def series_styles(backends, ranks):
    """(colour, marker, linestyle) per (backend, N): colour and marker name the backend, the line style
    names the rank count, so every series differs from every other one (a single colour cycle repeats
    after 10 series and made e.g. raw-mpi N=3 look like gloo N=2). Styles repeat only past 8 backends or
    8 rank counts."""
    backends = sorted(set(backends))
    ranks = sorted(set(ranks))
    styles = {}
    for i, b in enumerate(backends):
        for j, n in enumerate(ranks):
            styles[(b, n)] = (BACKEND_COLORS[i % len(BACKEND_COLORS)], BACKEND_MARKERS[i % len(BACKEND_MARKERS)],
                              RANK_LINESTYLES[j % len(RANK_LINESTYLES)])
    return styles


def efficiency_series(rows, predictions, use_predictions):
    """{(backend, N): [(size, busbw / reference)]}. Reference: the predictions when given, else the same
    backend's N=2 measurement; in that case the N=2 series is the reference itself (all 1.0, drawn as the
    1.0 line) and is left out rather than drawn on top of that line."""
    ref = {}
    if use_predictions:
        for p in predictions["predictions"]:
            ref[(p.get("backend", "*"), p["nranks"], p["size"])] = p["busbw_gbps"]
    meas = {(r["backend"], r["nranks"], r["size"]): r["busbw_gbps"] for r in rows}
    out = {}
    for (backend, n, size), bw in sorted(meas.items()):
        if n < 2 or (not use_predictions and n == 2):
            continue
        base = ref.get((backend, n, size), ref.get(("*", n, size))) if use_predictions else meas.get((backend, 2, size))
        if base:
            out.setdefault((backend, n), []).append((size, bw / base))
    return out


def self_test():
    """Checks the plot styling and the efficiency series without matplotlib (run by CTest)."""
    backends = ["host", "gloo", "mpi", "raw-mpi"]
    ranks = [1, 2, 3, 4]
    styles = series_styles(backends, ranks)
    assert len(set(styles.values())) == len(styles), "two series share colour, marker and line style"
    for b in backends:
        assert len({styles[(b, n)][2] for n in ranks}) == len(ranks), "rank counts of one backend look alike"
    for n in ranks:
        assert len({styles[(b, n)][0] for b in backends}) == len(backends), "backends at one N share a colour"
    rows = [{"backend": b, "nranks": n, "size": 1024, "busbw_gbps": float(n)} for b in backends for n in ranks]
    eff = efficiency_series(rows, {"predictions": []}, False)
    assert all(n != 2 for (_, n) in eff), "N=2 is the reference (the 1.0 line), not a series"
    assert eff[("gloo", 4)] == [(1024, 2.0)], eff
    preds = {"predictions": [{"backend": "*", "nranks": n, "size": 1024, "busbw_gbps": 1.0} for n in ranks]}
    eff = efficiency_series(rows, preds, True)
    assert ("mpi", 2) in eff, "with predictions N=2 is measured against them and drawn"
    assert "host" in parse_args([]).backends.split(","), "host is a default backend"
    print("scale-study self-test: ok")


def plot(args, rows, predictions):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = defaultdict(list)
    for r in rows:
        series[(r["backend"], r["nranks"])].append((r["size"], r["busbw_gbps"]))
    styles = series_styles([b for b, _ in series] + [p.get("backend", "*") for p in predictions["predictions"]],
                           [n for _, n in series] + [p["nranks"] for p in predictions["predictions"]])
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for (backend, n), pts in sorted(series.items()):
        if n < 2:
            continue
        pts.sort()
        color, marker, linestyle = styles[(backend, n)]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], color=color, marker=marker, ms=4, linestyle=linestyle,
                label=f"{backend} N={n}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("size (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title(f"{args.collective}: bus bandwidth vs size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    save(fig, args.out, "busbw_vs_size")

    # Efficiency vs reference.
    ref_label = "prediction" if args.predictions else "N=2 measured (the 1.0 line)"
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for (backend, n), pts in sorted(efficiency_series(rows, predictions, bool(args.predictions)).items()):
        color, marker, linestyle = styles[(backend, n)]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], color=color, marker=marker, ms=4, linestyle=linestyle,
                label=f"{backend} N={n}")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("size (bytes)")
    ax.set_ylabel(f"busbw / {ref_label}")
    ax.set_title("scaling efficiency (busbw is rank-count independent when scaling is ideal)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    save(fig, args.out, "efficiency")

    fig, ax = plt.subplots(figsize=(7, 4.2))
    pred_series = defaultdict(list)
    for p in predictions["predictions"]:
        pred_series[(p.get("backend", "*"), p["nranks"])].append((p["size"], p["busbw_gbps"]))
    for (backend, n), pts in sorted(pred_series.items()):
        color, marker, linestyle = styles[(backend, n)]
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], color=color, linestyle=linestyle,
                label=f"{backend} N={n} predicted")
        m = sorted(series.get((backend, n), []))
        if m:
            ax.plot([p[0] for p in m], [p[1] for p in m], color=color, marker=marker, ms=4, linestyle="none",
                    label=f"{backend} N={n} measured")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("size (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title("predicted (lines) vs measured (markers); model: see report.md", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=6, ncol=2)
    save(fig, args.out, "predicted_vs_measured")


def save(fig, out, name):
    fig.tight_layout()
    fig.savefig(os.path.join(out, name + ".svg"))
    fig.savefig(os.path.join(out, name + ".png"), dpi=80)


def report(args, rows, commands, predictions, argv):
    lines = ["# commkit-bench scaling study", "",
             "Reproduce every number below with:", "", "```", shlex.join(argv), "```", "",
             "which ran, per rank count:", "", "```"] + commands + ["```", ""]
    backends = sorted({r["backend"] for r in rows})
    sizes = sorted({r["size"] for r in rows})
    lines += [f"## busbw (GB/s), {args.collective}, out-of-place", "",
              "| size | " + " | ".join(f"{b} N={n}" for n in args.ranks_list for b in backends) + " |",
              "|---:|" + "---:|" * (len(backends) * len(args.ranks_list))]
    cell = {(r["backend"], r["nranks"], r["size"]): r for r in rows}
    for s in sizes:
        vals = []
        for n in args.ranks_list:
            for b in backends:
                r = cell.get((b, n, s))
                vals.append(f"{r['busbw_gbps']:.3f}" if r else "-")
        lines.append(f"| {s} | " + " | ".join(vals) + " |")
    lines += ["", "## time (us) and ratios, same run", "",
              "| N | size | " + " | ".join(f"{b} us" for b in backends) + " | " +
              " | ".join(f"{b}/{backends[0]}" for b in backends[1:]) + " |",
              "|---:|---:|" + "---:|" * (2 * len(backends) - 1)]
    for n in args.ranks_list:
        for s in sizes:
            rs = [cell.get((b, n, s)) for b in backends]
            if not rs[0]:
                continue
            ts = [f"{r['time_us']:.2f}" if r else "-" for r in rs]
            ratios = [f"{r['time_us'] / rs[0]['time_us']:.3f}" if r and rs[0]['time_us'] > 0 else "-" for r in rs[1:]]
            lines.append(f"| {n} | {s} | " + " | ".join(ts) + " | " + " | ".join(ratios) + " |")
    if "raw-mpi" in backends and "mpi" in backends:
        lines += ["", "## Wrapper overhead: commkit mpi backend vs raw MPI (same run)", "",
                  "| N | size | mpi us | raw-mpi us | overhead us | overhead % |", "|---:|---:|---:|---:|---:|---:|"]
        for n in args.ranks_list:
            for s in sizes:
                a, b = cell.get(("mpi", n, s)), cell.get(("raw-mpi", n, s))
                if a and b and b["time_us"] > 0:
                    d = a["time_us"] - b["time_us"]
                    lines.append(f"| {n} | {s} | {a['time_us']:.2f} | {b['time_us']:.2f} | {d:.2f} | "
                                 f"{100 * d / b['time_us']:.1f} |")
    wrong = sum(max(r.get("wrong", 0), 0) for r in rows)
    lines += ["", f"Verified: #wrong = {wrong} over {len(rows)} measurements.", "",
              f"Predictions: {predictions['model']}.", "",
              "![busbw vs size](busbw_vs_size.svg)", "", "![efficiency](efficiency.svg)", "",
              "![predicted vs measured](predicted_vs_measured.svg)", ""]
    with open(os.path.join(args.out, "report.md"), "w") as f:
        f.write("\n".join(lines))


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bench", default=shutil.which("commkit-bench") or "build/bin/commkit-bench")
    p.add_argument("--ranks", default="1,2,3,4", help="comma-separated rank counts")
    p.add_argument("--collective", default="allreduce")
    p.add_argument("--backends", default="host,gloo,mpi")
    p.add_argument("--raw", action="store_true", help="also the raw MPI baseline (mpirun only)")
    p.add_argument("--launcher", choices=["mpirun", "local"], default="mpirun" if shutil.which("mpirun") else "local")
    p.add_argument("-b", "--minbytes", default="8")
    p.add_argument("-e", "--maxbytes", default="4M")
    p.add_argument("-f", "--stepfactor", type=float, default=8)
    p.add_argument("-w", "--warmup", type=int, default=3)
    p.add_argument("-n", "--iters", type=int, default=20)
    p.add_argument("--predictions", help="JSON of predicted busbw per backend/nranks/size")
    p.add_argument("--from-results", help="re-plot an existing results.jsonl instead of running")
    p.add_argument("--mismatch-check", type=int, default=1, choices=[0, 1])
    p.add_argument("--port", type=int, default=29700)
    p.add_argument("--timeout", type=int, default=600)
    p.add_argument("--out", default="scale-study")
    p.add_argument("--self-test", action="store_true", help="check the plot styling logic and exit")
    return p.parse_args(argv)


def main():
    args = parse_args(sys.argv[1:])
    if args.self_test:
        self_test()
        return
    args.ranks_list = [int(x) for x in args.ranks.split(",") if x]
    os.makedirs(args.out, exist_ok=True)
    rows, commands = [], []
    if args.from_results:
        with open(args.from_results) as f:
            rows = [json.loads(l) for l in f if l.strip()]
        # Each row carries the command that measured it (commkit-bench's "reproduce" field; absent in
        # results from before it existed).
        commands = list(dict.fromkeys(r["reproduce"] for r in rows if r.get("reproduce")))
        if not commands:
            commands = ["(re-plotted from " + args.from_results + "; its rows do not record their command)"]
    else:
        for n in args.ranks_list:
            r, cmd = run_sweep(args, n)
            rows += r
            commands.append(cmd)
        with open(os.path.join(args.out, "results.jsonl"), "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    if args.predictions:
        with open(args.predictions) as f:
            predictions = json.load(f)
    elif any(r.get("pred_busbw_gbps") for r in rows):
        predictions = model_predictions(rows, args.collective)
    else:
        predictions = fitted_predictions(rows, args.collective, args.ranks_list)
    with open(os.path.join(args.out, "predictions.json"), "w") as f:
        json.dump(predictions, f, indent=1)
    plot(args, rows, predictions)
    report(args, rows, commands, predictions, [os.path.basename(sys.argv[0])] + sys.argv[1:])
    print(os.path.join(args.out, "report.md"))


if __name__ == "__main__":
    main()
