#!/usr/bin/env python3
"""Runs every CPU test of PyTorch's generic distributed suite against backend="commkit" (forked ranks,
one test at a time, each bounded by the suite's join timeout) and summarises the result.

    PYTHONPATH=<build>/torch-plain/python/pkg python tests/python/torch_suite/run_suite.py \
        [--out DIR] [--filter 'not cuda and not nccl'] [--timeout SECONDS] [--total-timeout SECONDS] [--json]

The tests whose names mention CUDA or NCCL are left out by default (a CPU-only third-party backend
cannot run them). The pytest log and the JUnit XML go to --out; the summary lists the counts, the
skip reasons as the suite states them and, for each failure, the last line of the exception a rank
raised. Exit status: 0 when nothing failed, 1 when a test failed, 2 when the run could not complete.
docs/pytorch.md records a run and explains each failure class.
"""

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))


def last_exception_line(text):
    """The last 'SomeError: message' line of a traceback, or the text's last line."""
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    for ln in reversed(lines):
        if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b", ln):
            return ln[:300]
    return lines[-1][:300] if lines else ""


def rank_exception(text):
    """The exception a rank raised, from the suite's 'Process N exited ... and exception:' report."""
    text = "\n".join(re.sub(r"^E {0,11}", "", ln) for ln in (text or "").splitlines())  # pytest's 'E   ' prefix
    m = re.search(r"exited with error code \d+ and exception:\n(.*?)(?:\nProcess \d+ exited|\Z)", text or "", re.S)
    return last_exception_line(m.group(1) if m else text)


def summarise(xml_path):
    tree = ET.parse(xml_path)
    results = []
    for case in tree.iter("testcase"):
        name = case.get("name")
        secs = float(case.get("time", 0))
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        skipped = case.find("skipped")
        if failure is not None:
            body = (failure.get("message") or "") + "\n" + (failure.text or "")
            results.append({"test": name, "outcome": "failed", "seconds": secs, "reason": rank_exception(body)})
        elif skipped is not None:
            reason = (skipped.get("message") or "").strip()
            results.append({"test": name, "outcome": "skipped", "seconds": secs, "reason": reason})
        else:
            results.append({"test": name, "outcome": "passed", "seconds": secs, "reason": ""})
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="directory for pytest.log and junit.xml (default: a new temporary one)")
    ap.add_argument("--filter", default="not cuda and not nccl", help="pytest -k expression (default: %(default)s)")
    ap.add_argument("--timeout", type=int, default=120, help="seconds per test before its ranks are killed")
    ap.add_argument("--total-timeout", type=int, default=3 * 3600, help="seconds for the whole run")
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--json", action="store_true", help="print the per-test results as JSON")
    args = ap.parse_args()

    out = args.out or tempfile.mkdtemp(prefix="commkit-torch-suite-out-")
    os.makedirs(out, exist_ok=True)
    xml_path = os.path.join(out, "junit.xml")
    log_path = os.path.join(out, "pytest.log")
    env = dict(os.environ, WORLD_SIZE=str(args.world_size), DISTRIBUTED_TESTS_DEFAULT_TIMEOUT=str(args.timeout))
    cmd = [sys.executable, "-m", "pytest", "-v", "-rfEs", "-p", "no:cacheprovider", f"--junitxml={xml_path}",
           os.path.join(HERE, "run_distributed_test.py"), "-k", f"TestDistBackendWithFork and ({args.filter})"]
    start = time.monotonic()
    with open(log_path, "w") as log:
        try:
            rc = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=args.total_timeout,
                                check=False).returncode
        except subprocess.TimeoutExpired:
            print(f"run_suite: the run exceeded --total-timeout={args.total_timeout}s; log in {log_path}",
                  file=sys.stderr)
            return 2
    wall = time.monotonic() - start
    if not os.path.exists(xml_path):
        print(f"run_suite: pytest exited {rc} without results; log in {log_path}", file=sys.stderr)
        return 2

    results = summarise(xml_path)
    counts = collections.Counter(r["outcome"] for r in results)
    if args.json:
        print(json.dumps({"wall_seconds": round(wall, 1), "counts": counts, "results": results}, indent=1))
    else:
        print(f"{len(results)} tests in {wall:.0f} s: {counts['passed']} passed, {counts['failed']} failed, "
              f"{counts['skipped']} skipped (log: {log_path})")
        skips = collections.defaultdict(list)
        for r in results:
            if r["outcome"] == "skipped":
                skips[r["reason"]].append(r["test"])
        print("\nskipped, by the suite's reason:")
        for reason, tests in sorted(skips.items(), key=lambda kv: -len(kv[1])):
            print(f"  {len(tests):3d}  {reason}")
            print("       " + ", ".join(t.removeprefix("test_") for t in sorted(tests)))
        failed = [r for r in results if r["outcome"] == "failed"]
        if failed:
            print("\nfailed:")
            for r in failed:
                print(f"  {r['test']} ({r['seconds']:.0f} s): {r['reason']}")
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
