#!/usr/bin/env python3
"""Fault-injection trials for ProcessGroup: hangs, crashes, exit times and who gets named.

Each trial starts one job of comm_pg_fault_inject (tests/comm/pg_fault_inject.cc) under a launcher
(commkit-run, mpirun, torchrun) with one injected fault on one rank (the victim), and judges it:

  hang     the job did not end within the hard limit (timeout + 60 s; it is then killed)
  crash    a sanitizer report, a signal other than the victim's own SIGKILL, or a rank without a
           result that the launcher did not end
  named    every survivor's error names the victim, and only the victim, as the rank that never
           reached the operation or stopped responding (mismatch: the per-rank diff shows the
           victim's different count)
  exit     a survivor's exit (after its ProcessGroup is destroyed) within timeout + 1 s of entering
           the failed operation; store-host-exits: within 2 s of its 1 s pause

Under mpirun a rank killed by a signal makes mpirun end the whole job: survivors may be ended by the
launcher before they report; that is judged "ended by launcher" (named when mpirun's message names
the victim's rank).

  pg_fault_inject.py --bin build/test/tests/comm_pg_fault_inject --commkit-run build/test/bin/commkit-run \\
      --mpirun mpirun --trials 200 --json results.json
  pg_fault_inject.py ... --quick       (the CTest comm_pg_fault_inject: one trial per cell, ~12 jobs)

Exit status: 0 when no trial hung, crashed, misnamed or exited late; 1 otherwise; 2 on usage errors.
"""

import argparse
import itertools
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time

CRASH_PATTERNS = [
    r"ERROR: AddressSanitizer", r"ERROR: LeakSanitizer", r"runtime error:", r"Segmentation fault",
    r"signal 11\b", r"SIGSEGV", r"SIGABRT", r"signal 6\b", r"core dumped", r"terminate called",
]

# (launcher, backend, fault) cells that make sense: the mpi backend needs mpirun.
FAULTS = ["kill", "delay", "mismatch", "store-host-exits"]


def cells(launchers, backends, faults):
    for launcher, backend, fault in itertools.product(launchers, backends, faults):
        if backend == "mpi" and launcher != "mpirun":
            continue
        if fault == "store-host-exits" and launcher == "commkit-run":
            continue  # commkit-run hosts the store itself: rank 0 does not
        yield launcher, backend, fault


def command(args, launcher, backend, fault, victim, np):
    prog = [args.bin, "--backend", backend, "--fault", fault, "--victim", str(victim),
            "--timeout-ms", str(args.timeout_ms), "--count", str(args.count)]
    if launcher == "commkit-run":
        return [args.commkit_run, "-n", str(np), "--grace", "3", "--kill-after", "2", "--"] + prog
    if launcher == "mpirun":
        return [args.mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(np)] + prog
    if launcher == "torchrun":
        return [args.torchrun, "--standalone", f"--nproc-per-node={np}", "--no-python"] + prog
    raise ValueError(launcher)


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def job_env(env, launcher):
    env = dict(env)
    if launcher == "torchrun":
        # torchrun's agent serves its own store on MASTER_PORT: commkit's rank 0 hosts its store on
        # another port (rank 0 still hosts it, as under mpirun).
        env["COMMKIT_STORE"] = f"tcp://127.0.0.1:{free_port()}"
    return env


def run_job(cmd, hard_limit, env):
    start = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True, text=True, errors="replace")
    try:
        out, _ = proc.communicate(timeout=hard_limit)
        hung = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        hung = True
    end = time.time()
    return proc.returncode, out, hung, start, end


def parse(out):
    results, exits, garbled = {}, {}, []
    for line in out.splitlines():
        for tag, into in (("PGFI-EXIT ", exits), ("PGFI ", results)):
            i = line.find(tag)
            if i < 0:
                continue
            try:
                obj = json.loads(line[i + len(tag):])
                into[obj["rank"]] = obj
            except (ValueError, KeyError):
                garbled.append(line)
            break
    return results, exits, garbled


def named_ranks(message, op="allreduce #2"):
    """Ranks a diagnosis names as missing or unresponsive."""
    named = set()
    for label in (f"ranks that never reached {op}: ", "ranks that stopped responding: "):
        i = message.find(label)
        if i < 0:
            continue
        rest = message[i + len(label):]
        rest = rest.split("; ", 1)[0]
        named.update(int(m) for m in re.findall(r"(?:^|, )(\d+) \(", rest))
    # The host backend's own liveness check: "rank 2 (pid 123) exited while rank 0 waited ...".
    named.update(int(m) for m in re.findall(r"\brank (\d+) \(pid \d+\) exited", message))
    return named


def judge(args, launcher, backend, fault, victim, np, rc, out, hung, t0, t1):
    results, exits, garbled = parse(out)
    verdict = {"launcher": launcher, "backend": backend, "fault": fault, "victim": victim, "np": np,
               "launcher_status": rc, "hung": hung, "job_s": round(t1 - t0, 3), "problems": [],
               "exit_after_start_ms": [], "ended_by_launcher": False, "named": None}
    problems = verdict["problems"]
    for line in garbled:
        problems.append(f"unparsable result line (interleaved output?): {line[:200]}")
    if hung:
        problems.append("hang: the job did not end within the hard limit")
    for pat in CRASH_PATTERNS:
        if re.search(pat, out):
            problems.append(f"crash: output matches {pat!r}")
    survivors = [r for r in range(np) if not (fault in ("kill", "delay") and r == victim)]
    if fault == "store-host-exits":
        survivors = [r for r in range(1, np)]
    launcher_ended = fault == "kill" and (
        (launcher == "mpirun" and ("exited on signal" in out or "noticed that process rank" in out or
                                   "detected that one or more processes" in out)) or
        (launcher == "torchrun" and "Sending process" in out and "closing signal" in out))
    verdict["ended_by_launcher"] = launcher_ended
    # Launchers end the whole job when the first rank exits with an error: a survivor still
    # diagnosing then is ended before it reports (judged by the survivors that did report).
    # mpirun's own MPI_ABORT notice is sometimes lost ("ORTE_ERROR_LOG: Data unpack would read past
    # end of buffer in file .../show_help.c", Open MPI 4.1.4): the mpi backend's line before it counts.
    launcher_cut = (launcher == "mpirun" and ("MPI_ABORT was invoked" in out or
                                              "ending the job with MPI_Abort(" in out or
                                              "detected that one or more processes exited" in out)) or \
                   (launcher == "torchrun" and "closing signal" in out)
    named_ok = True
    for r in survivors:
        res = results.get(r)
        if res is None:
            if launcher_ended:
                continue
            if launcher_cut and any(results.get(q) for q in survivors):
                verdict.setdefault("cut_by_launcher", []).append(r)
                continue
            problems.append(f"rank {r}: no result (crashed or killed)")
            named_ok = False
            continue
        msg = res["message"]
        if fault in ("kill", "delay"):
            if res["outcome"] == "ok":
                problems.append(f"rank {r}: all-reduce #2 succeeded despite the fault")
                named_ok = False
            else:
                named = named_ranks(msg)
                if named != {victim}:
                    problems.append(f"rank {r}: named {sorted(named)} instead of [{victim}]: {msg}")
                    named_ok = False
        elif fault == "mismatch":
            if res["code"] != "Mismatch" or f"rank {victim}: allreduce f32 sum count={args.count + 1}" not in msg:
                problems.append(f"rank {r}: expected a Mismatch naming rank {victim}'s count: {res['code']} {msg}")
                named_ok = False
        elif fault in ("none", "store-host-exits"):
            if res["outcome"] != "ok":
                problems.append(f"rank {r}: failed without a fault: {msg}")
        ex = exits.get(r)
        if ex is not None:
            start = res["start_ms"] if fault != "store-host-exits" else res["end_ms"] + 1000
            after = ex["exit_ms"] - start
            verdict["exit_after_start_ms"].append(after)
            bound = args.timeout_ms + 1000 if fault != "store-host-exits" else 2000
            if after > bound:
                problems.append(f"rank {r}: exited {after} ms after entering the failed operation (bound {bound} ms)")
        elif not launcher_ended and not launcher_cut and backend != "mpi":
            # Under mpi a failed rank may end in MPI_Abort before its exit line; the job time bounds it.
            problems.append(f"rank {r}: no exit line")
    if launcher_ended and not any(results.get(r) for r in survivors):
        # The launcher's own report names the dead rank (mpirun: "process rank N", torchrun: "rank : N").
        named_ok = re.search(rf"process rank {victim}\b|rank\s*:\s*{victim} \(local_rank", out) is not None
    verdict["named"] = named_ok
    if fault in ("kill", "delay") and not named_ok and not any("named" in p for p in problems):
        problems.append("the victim was not named")
    # The whole job, launcher included: bounded too (grace periods of the launcher aside).
    return verdict


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", help="comm_pg_fault_inject")
    p.add_argument("--commkit-run", default=None)
    p.add_argument("--mpirun", default=shutil.which("mpirun"))
    p.add_argument("--torchrun", default=shutil.which("torchrun"))
    p.add_argument("--launchers", default="commkit-run,mpirun,torchrun")
    p.add_argument("--backends", default="host,gloo,mpi")
    p.add_argument("--faults", default=",".join(FAULTS))
    p.add_argument("--np", type=int, default=3)
    p.add_argument("--timeout-ms", type=int, default=2000)
    p.add_argument("--count", type=int, default=4096)
    p.add_argument("--trials", type=int, default=0, help="total trials, spread round-robin over the cells")
    p.add_argument("--quick", action="store_true", help="one trial per cell")
    p.add_argument("--json", help="write every trial's verdict here")
    p.add_argument("--markdown", action="store_true", help="print the summary as a Markdown table")
    p.add_argument("--from-json", help="summarise the trials of an earlier --json file instead of running")
    p.add_argument("--version", action="version", version="pg_fault_inject 1")
    args = p.parse_args()
    if args.from_json:
        with open(args.from_json) as f:
            verdicts = json.load(f)["trials"]
        seen = []
        for v in verdicts:
            c = (v["launcher"], v["backend"], v["fault"])
            if c not in seen:
                seen.append(c)
        return summarise(seen, verdicts, args.markdown)
    if not args.bin:
        p.error("--bin is required (or --from-json)")
    launchers = []
    for l in args.launchers.split(","):
        tool = {"commkit-run": args.commkit_run, "mpirun": args.mpirun, "torchrun": args.torchrun}.get(l)
        if tool and (os.path.exists(tool) or shutil.which(tool)):
            launchers.append(l)
        else:
            print(f"pg_fault_inject: launcher {l} not available: skipped", file=sys.stderr)
    if not launchers:
        print("pg_fault_inject: no launcher available", file=sys.stderr)
        return 2
    all_cells = list(cells(launchers, args.backends.split(","), args.faults.split(",")))
    if not all_cells:
        print("pg_fault_inject: no (launcher, backend, fault) cell to run", file=sys.stderr)
        return 2
    n = len(all_cells) if args.quick or args.trials <= 0 else args.trials
    env = dict(os.environ)
    env.setdefault("COMMKIT_LOG", "warn")
    verdicts = []
    hard_limit = args.timeout_ms / 1000 + 60
    for i in range(n):
        launcher, backend, fault = all_cells[i % len(all_cells)]
        # Victims rotate over the ranks (rank 0 hosts the store under mpirun and torchrun).
        victim = (i // len(all_cells)) % args.np if fault != "store-host-exits" else 0
        cmd = command(args, launcher, backend, fault, victim, args.np)
        rc, out, hung, t0, t1 = run_job(cmd, hard_limit, job_env(env, launcher))
        v = judge(args, launcher, backend, fault, victim, args.np, rc, out, hung, t0, t1)
        verdicts.append(v)
        status = "ok" if not v["problems"] else "PROBLEM"
        print(f"[{i + 1}/{n}] {launcher:11s} {backend:4s} {fault:16s} victim {victim}: {status} "
              f"job {v['job_s']:.1f} s, survivor exits {v['exit_after_start_ms']} ms"
              + (" (ended by launcher)" if v["ended_by_launcher"] else ""), flush=True)
        for prob in v["problems"]:
            print(f"    {prob}", flush=True)
        if v["problems"]:
            print("    --- job output ---\n    " + "\n    ".join(out.splitlines()[-40:]), flush=True)
    bad = summarise(all_cells, verdicts, args.markdown)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"timeout_ms": args.timeout_ms, "np": args.np, "trials": verdicts}, f, indent=1)
    return 1 if bad else 0


def summarise(all_cells, verdicts, markdown):
    """Prints hangs, crashes, misnamed and late exits per cell; returns the number of bad trials."""
    if markdown:
        print("| launcher | backend | fault | trials | hangs | crashes | misnamed | late | survivor exit ms p50 / p90 / max |")
        print("|---|---|---|---|---|---|---|---|---|")
    else:
        print("\nlauncher     backend fault             trials hangs crashes misnamed late  exit ms p50/p90/max")
    bad = 0
    for cell in all_cells:
        vs = [v for v in verdicts if (v["launcher"], v["backend"], v["fault"]) == cell]
        if not vs:
            continue
        hangs = sum(v["hung"] for v in vs)
        crashes = sum(any(p.startswith("crash") or "no result" in p for p in v["problems"]) for v in vs)
        misnamed = sum(any("named" in p or "Mismatch" in p for p in v["problems"]) for v in vs)
        late = sum(any("exited" in p and "bound" in p for p in v["problems"]) for v in vs)
        exits = sorted(x for v in vs for x in v["exit_after_start_ms"])
        dist = "-"
        if exits:
            q = lambda f: exits[min(len(exits) - 1, int(f * len(exits)))]
            dist = f"{statistics.median(exits):.0f}/{q(0.9)}/{exits[-1]}"
        bad += sum(bool(v["problems"]) for v in vs)
        if markdown:
            print(f"| {cell[0]} | {cell[1]} | {cell[2]} | {len(vs)} | {hangs} | {crashes} | {misnamed} | {late} | {dist.replace('/', ' / ')} |")
        else:
            print(f"{cell[0]:12s} {cell[1]:7s} {cell[2]:17s} {len(vs):6d} {hangs:5d} {crashes:7d} {misnamed:8d} {late:4d}  {dist}")
    print(f"\n{len(verdicts)} trials, {bad} with problems")
    return bad


if __name__ == "__main__":
    sys.exit(main())
