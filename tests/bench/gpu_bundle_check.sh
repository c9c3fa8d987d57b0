#!/usr/bin/env bash
# CPU-side check of the GPU bundle (issue #17): packs this build's programs and tests into a bundle
# (tools/gpu-bundle --pack-only: ldd collection, manifest; nothing is built), runs
# tools/gpu-check.sh --bundle on it and checks summary.json: exit 2 and every GPU step skipped with
# its reason on a machine without a GPU (0 and every step passed with one), the CPU steps passed.
# Usage: gpu_bundle_check.sh SOURCE_DIR BUILD_DIR
set -u
src=$1
build=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/commkit-bundle-check-XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
# This build may carry sanitizer runtimes and debug info: the 64 MiB limit is for the Release bundle.
"$src/tools/gpu-bundle" --pack-only --build-dir "$build" --out "$tmp/bundle" --max-mib 4096 || exit 1
for f in manifest.json gpu-check.sh bin/commkit-bench bin/gpudoctor bin/commkit-run; do
  [ -e "$tmp/bundle/$f" ] || { echo "bundle lacks $f"; exit 1; }
done
if ls "$tmp/bundle/lib" | grep -E '^(libc|libm|libcuda|libnccl)\.so' ; then
  echo "the bundle carries the target's own libraries (above)"; exit 1
fi
"$src/tools/gpu-check.sh" --bundle "$tmp/bundle" --out "$tmp/out" --quick
rc=$?
python3 - "$tmp/out/summary.json" "$rc" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
rc = int(sys.argv[2])
steps = {s["name"]: s for s in doc["steps"]}
problems = []
for name in ("nccl-unit", "nccl-engine-gpu", "nccl-backend-gpu", "gpudoctor", "bench-host", "bench-nccl-allreduce"):
    if name not in steps:
        problems.append(f"step {name} missing")
if doc["failed"]:
    problems.append(f"failed steps: {doc['failed']}")
import re
manifest = json.load(open(sys.argv[1].replace("/out/summary.json", "/bundle/manifest.json")))
if not re.fullmatch(r"\d+\.\d+", str(manifest.get("built_with_glibc"))):
    problems.append(f"manifest built_with_glibc is {manifest.get('built_with_glibc')!r}, not a version")
if not re.fullmatch(r"GLIBCXX_[\d.]+", str(manifest.get("requires_glibcxx"))):
    problems.append(f"manifest requires_glibcxx is {manifest.get('requires_glibcxx')!r}")
if doc.get("bundle", {}).get("built_with_glibc") != manifest.get("built_with_glibc"):
    problems.append("summary.json does not carry the bundle's glibc")
for name in ("nccl-unit", "bench-host", "gpudoctor"):
    if steps.get(name, {}).get("status") != "pass":
        problems.append(f"{name} did not pass: {steps.get(name)}")
if doc["gpus"] == 0:
    if rc != 2 or doc["verdict"] != "no-gpu":
        problems.append(f"no GPU: expected exit 2 / verdict no-gpu, got {rc} / {doc['verdict']}")
    for s in doc["steps"]:
        if s["name"].startswith(("bench-nccl", "nccl-engine", "nccl-backend")):
            if s["status"] != "skip" or not s["reason"]:
                problems.append(f"{s['name']}: expected a skip with a reason, got {s}")
elif rc != 0 or doc["verdict"] != "pass":
    problems.append(f"GPU present: expected exit 0 / pass, got {rc} / {doc['verdict']}")
for p in problems:
    print("gpu_bundle_check:", p)
print(json.dumps(doc, indent=1))
sys.exit(1 if problems else 0)
PY
