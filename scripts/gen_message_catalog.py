#!/usr/bin/env python3
"""Generate gpudoctor explain's message catalog from the sources of the libraries that print the messages.

The catalog (diagnostics/data/message_catalog.tsv) lists every log format string that NCCL, aws-ofi-nccl,
libfabric (core + EFA provider), rdma-core (libibverbs status strings), the CUDA runtime (error strings)
and PyTorch c10d print, with where it comes from: project, the release range that prints it, the source
file(s) and, for NCCL WARNs, the ncclResult_t the surrounding code returns. gpudoctor turns each format
string into a matcher (literal segments + typed captures), so a message printed by a release the rules
were never tuned on is still recognised. Only the extracted strings are written; no source is copied.

Rerun (the fetched git snapshots are plain bare/mirror repositories; any clone with tags works):

  python3 scripts/gen_message_catalog.py \\
      --nccl path/to/nccl \\
      --ofi path/to/aws-ofi-nccl \\
      --rdma-core path/to/rdma-core \\
      --libfabric path/to/libfabric \\
      --cudart /usr/local/cuda/lib64/libcudart.so \\
      --pytorch-messages scripts/explain_catalog/pytorch_messages.tsv \\
      --out diagnostics/data/message_catalog.tsv

  --pytorch DIR (a checkout of pytorch/pytorch) extracts c10d/elastic strings from the source instead of the
  transcribed list. Every input is optional; missing ones are skipped with a note on stderr. The output is
  deterministic (sorted, no timestamps) so a rerun on the same inputs gives the same file.
"""
import argparse
import ctypes
import hashlib
import os
import re
import subprocess
import sys

# ---------------------------------------------------------------------------------------------------------
# git helpers


def git(repo, *args):
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True).stdout.decode(
        "utf-8", "replace")


def version_key(tag):
    return [int(x) if x.isdigit() else x for x in re.findall(r"\d+|[A-Za-z]+", tag)]


def tags_matching(repo, pattern, lo=None, hi=None):
    out = []
    for t in git(repo, "tag").split():
        m = re.fullmatch(pattern, t)
        if not m:
            continue
        v = tuple(int(x) for x in m.groups())
        if lo and v < lo:
            continue
        if hi and v > hi:
            continue
        out.append((v, t))
    out.sort()
    return [t for _, t in out]


def tree_files(repo, tag, dirs, exts):
    lines = git(repo, "ls-tree", "-r", tag, "--", *dirs).splitlines()
    out = []
    for ln in lines:
        meta, path = ln.split("\t", 1)
        _, kind, blob = meta.split()
        if kind == "blob" and path.endswith(exts):
            out.append((path, blob))
    return out


_blob_cache = {}


def blob_text(repo, blob):
    key = (repo, blob)
    if key not in _blob_cache:
        _blob_cache[key] = git(repo, "cat-file", "blob", blob)
    return _blob_cache[key]


# ---------------------------------------------------------------------------------------------------------
# A small C tokenizer: enough to pull the format argument out of a logging macro call.

TOKEN = re.compile(
    r'\\\n|//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|[A-Za-z_]\w*|\d[\w.]*|\S', re.S)

PRI = {"d": "%d", "i": "%d", "u": "%u", "x": "%x", "X": "%X", "o": "%o"}


def c_unescape(s):
    out, i = [], 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            n = s[i + 1]
            i += 2
            if n == "n":
                out.append("\n")
            elif n == "t":
                out.append("\t")
            elif n in "\\\"'?":
                out.append(n)
            elif n == "x":
                m = re.match(r"[0-9a-fA-F]+", s[i:])
                out.append(chr(int(m.group(0), 16)) if m else "x")
                i += len(m.group(0)) if m else 0
            elif n.isdigit():
                m = re.match(r"[0-7]{0,2}", s[i:])
                out.append(chr(int(n + m.group(0), 8)))
                i += len(m.group(0))
            else:
                out.append(n)
        else:
            out.append(c)
            i += 1
    return "".join(out)


def call_args(text, start):
    """Tokens of each argument of the call whose '(' is at text[start]; (args, end offset)."""
    depth, args, cur = 0, [], []
    for m in TOKEN.finditer(text, start):
        tok = m.group(0)
        if tok.startswith(("//", "/*")) or tok == "\\\n":
            continue
        if tok in "([{" and len(tok) == 1:
            depth += 1
            if depth == 1:
                continue
        elif tok in ")]}" and len(tok) == 1:
            depth -= 1
            if depth == 0:
                args.append(cur)
                return args, m.end()
        elif tok == "," and depth == 1:
            args.append(cur)
            cur = []
            continue
        cur.append(tok)
        if m.start() - start > 4000:
            break
    return None, start


def format_of(tokens):
    """printf format from an argument made of string literals, PRI macros and macro parameters."""
    parts, literal = [], False
    for tok in tokens:
        if tok.startswith('"'):
            parts.append(c_unescape(tok[1:-1]))
            literal = True
        elif re.fullmatch(r"PRI([diuxXo])(8|16|32|64|PTR|MAX)", tok):
            parts.append(PRI[tok[3]][1:])
        elif re.fullmatch(r"[A-Za-z_]\w*", tok):
            parts.append("%s")  # macro parameter or string constant pasted into the format
        else:
            return None
    if not literal:
        return None
    return "".join(parts)


RESULT = re.compile(r"\b(nccl(?:SystemError|InternalError|InvalidArgument|InvalidUsage|RemoteError|"
                    r"UnhandledCudaError|InProgress))\b")


def result_after(text, end):
    """The ncclResult_t the code right after a WARN returns (its error code path), if visible."""
    window = text[end:end + 240]
    brace = window.find("}")
    if brace >= 0:
        window = window[:brace]
    m = RESULT.search(window)
    return m.group(1) if m else ""


# ---------------------------------------------------------------------------------------------------------
# Catalog accumulation


class Catalog:
    def __init__(self):
        self.entries = {}  # (source, level, format) -> dict

    def add(self, source, level, fmt, version, path, result="", order=None):
        fmt = fmt.rstrip("\n").replace("\r", "")
        if len(re.sub(r"%[-+ #0-9.*]*[hlLzjt]*[a-zA-Z%]", "", fmt).strip()) < 4:
            return  # no literal text to recognise the message by ("%s", "%s:%d -> %d" still counts)
        key = (source, level, fmt)
        e = self.entries.setdefault(key, {"versions": [], "files": set(), "results": set()})
        if version not in e["versions"]:
            e["versions"].append(version)
        e["files"].add(path)
        if result:
            e["results"].add(result)

    def rows(self, orders):
        rows = []
        for (source, level, fmt), e in self.entries.items():
            order = orders.get(source, [])
            idx = sorted({order.index(v) for v in e["versions"] if v in order})
            ranges, run = [], []
            for i in idx:
                if run and i != run[-1] + 1:
                    ranges.append(run)
                    run = []
                run.append(i)
            if run:
                ranges.append(run)
            vers = ",".join(order[r[0]] if len(r) == 1 else order[r[0]] + ".." + order[r[-1]] for r in ranges)
            if not order:
                vers = ",".join(sorted(e["versions"]))
            ident = source + ":" + hashlib.sha1(f"{source}\0{level}\0{fmt}".encode()).hexdigest()[:10]
            rows.append([ident, source, level, topic(source, fmt), vers, ";".join(sorted(e["files"])),
                         ";".join(sorted(e["results"])), fmt])
        rows.sort(key=lambda r: (r[1], r[7], r[2]))
        return rows


# Coarse topics for reading the catalog and for the rules' family lookups. Ours; first match wins.
TOPICS = [
    ("dup_gpu", r"Duplicate GPU"),
    ("shm", r"/dev/shm|shared memory|shm|posix_fallocate|failed to extend|ftruncate|mmap"),
    ("socket_if", r"socket interface|SOCKET_IFNAME|IFNAME|address family|family %d|ncclSocketInit|findInterface"),
    ("ib_completion", r"completion|wc_status|IBV_WC|opcode"),
    ("ib_verbs", r"ibv_|NET/IB|IB :|RoCE|GID|gid|HCA|mlx|verbs"),
    ("gdr", r"GPU Direct RDMA|GDR|peermem|peer_mem|dmabuf|DMA-BUF"),
    ("ofi", r"NET/OFI|OFI|fi_getinfo|libfabric|provider|EFA|efa|fi_"),
    ("nvls", r"NVLS|multicast|Multicast|cuMulticast"),
    ("p2p", r"P2P|peer access|IPC|Ipc|cuMem"),
    ("topo", r"topo|XML|xml|Attribute|NCCL_TOPO"),
    ("cuda", r"Cuda|CUDA|cuda"),
    ("socket", r"[Ss]ocket|connect|Connect|bootstrap|Bootstrap|listen|accept|errno|poll"),
    ("version", r"version|Version"),
    ("plugin", r"plugin|Plugin|dlopen"),
    ("watchdog", r"[Ww]atchdog|SeqNum|[Tt]imeout|timed out|heartbeat"),
    ("store", r"TCPStore|[Ss]tore|rendezvous|Rendezvous"),
    ("elastic", r"[Ee]lastic|ChildFailed|[Ss]ignal|SIGKILL|exitcode"),
    ("mem", r"[Mm]emory|alloc|Alloc|malloc"),
]


def topic(source, fmt):
    if source == "cudart":
        return "cuda"
    if source == "ibverbs":
        return "ib_completion"
    for name, pat in TOPICS:
        if re.search(pat, fmt):
            return name
    return "other"


# ---------------------------------------------------------------------------------------------------------
# Sources


def scan_repo(cat, repo, source, tags, dirs, exts, macros, strip_tag):
    """macros: name -> (level, index of the format argument)."""
    call = re.compile(r"\b(" + "|".join(map(re.escape, macros)) + r")\s*\(")
    parsed = {}
    for tag in tags:
        version = strip_tag(tag)
        for path, blob in tree_files(repo, tag, dirs, exts):
            if blob not in parsed:
                text = blob_text(repo, blob)
                found = []
                for m in call.finditer(text):
                    if text[max(0, m.start() - 8):m.start()].rstrip().endswith("define"):
                        continue
                    args, end = call_args(text, m.end() - 1)
                    level, idx = macros[m.group(1)]
                    if not args or len(args) <= idx:
                        continue
                    fmt = format_of(args[idx])
                    if fmt is None:
                        continue
                    found.append((level, fmt, result_after(text, end) if level == "WARN" else ""))
                parsed[blob] = found
            for level, fmt, result in parsed[blob]:
                cat.add(source, level, fmt, version, path, result)


def scan_nccl(cat, repo):
    tags = tags_matching(repo, r"v(\d+)\.(\d+)\.(\d+)-(\d+)", (2, 4, 0, 0), (2, 28, 999, 999))
    # One tag per release (the last -N rebuild).
    last = {}
    for t in tags:
        last[re.match(r"v([\d.]+)-", t).group(1)] = t
    tags = sorted(last.values(), key=version_key)
    scan_repo(cat, repo, "nccl", tags, ["src"], (".cc", ".cu", ".h", ".cpp"),
              {"WARN": ("WARN", 0), "INFO": ("INFO", 1)}, lambda t: re.match(r"v([\d.]+)-", t).group(1))
    # Envelope strings: ncclGetErrorString's texts.
    for tag in tags:
        v = re.match(r"v([\d.]+)-", tag).group(1)
        for path, blob in tree_files(repo, tag, ["src"], (".cc",)):
            if not path.endswith(("init.cc", "collectives.cc")):
                continue
            text = blob_text(repo, blob)
            m = re.search(r"ncclGetErrorString\s*\([^)]*\)\s*\{(.*?)\n\}", text, re.S)
            if not m:
                continue
            for s in re.findall(r'return\s+"((?:\\.|[^"\\])*)"', m.group(1)):
                cat.add("nccl", "ERRSTR", c_unescape(s), v, path)
    return [re.match(r"v([\d.]+)-", t).group(1) for t in tags]


def scan_ofi(cat, repo):
    tags = tags_matching(repo, r"v(\d+)\.(\d+)\.(\d+)(?:-aws)?")
    tags = sorted(set(tags), key=version_key)
    scan_repo(cat, repo, "aws-ofi-nccl", tags, ["src", "include"], (".c", ".cpp", ".h"),
              {"NCCL_OFI_WARN": ("WARN", 0), "NCCL_OFI_INFO": ("INFO", 1)}, lambda t: t.lstrip("v"))
    return [t.lstrip("v") for t in tags]


def scan_libfabric(cat, repo):
    tags = [t for t in tags_matching(repo, r"v(\d+)\.(\d+)\.(\d+)", (1, 9, 0)) if "rc" not in t]
    # Minor releases only: libfabric's patch releases rarely change messages and there are many.
    last = {}
    for t in tags:
        last[t.rsplit(".", 1)[0]] = t
    tags = sorted(last.values(), key=version_key)
    scan_repo(cat, repo, "libfabric", tags, ["prov/efa/src", "src"], (".c", ".h"),
              {"FI_WARN": ("WARN", 2), "EFA_WARN": ("WARN", 1), "FI_WARN_ONCE": ("WARN", 2),
               "EFA_WARN_ONCE": ("WARN", 1)}, lambda t: t.lstrip("v"))
    # fi_strerror's table.
    for tag in tags:
        for path, blob in tree_files(repo, tag, ["src"], (".c",)):
            text = blob_text(repo, blob)
            m = re.search(r"errstr\[\]\s*=\s*\{(.*?)\};", text, re.S)
            if m:
                for s in re.findall(r'"((?:\\.|[^"\\])*)"', m.group(1)):
                    cat.add("libfabric", "ERRSTR", c_unescape(s), tag.lstrip("v"), path)
    return [t.lstrip("v") for t in tags]


def scan_rdma_core(cat, repo):
    tags = tags_matching(repo, r"v(\d+)\.(\d+)", (17, 0))
    for tag in tags:
        try:
            text = git(repo, "show", f"{tag}:libibverbs/enum_strs.c")
        except subprocess.CalledProcessError:
            continue
        m = re.search(r"wc_status_str\[\]\s*=\s*\{(.*?)\};", text, re.S)
        if m:
            for s in re.findall(r'"((?:\\.|[^"\\])*)"', m.group(1)):
                cat.add("ibverbs", "WCSTATUS", c_unescape(s), tag.lstrip("v"), "libibverbs/enum_strs.c")
    return [t.lstrip("v") for t in tags]


def scan_cudart(cat, lib):
    rt = ctypes.CDLL(lib)
    rt.cudaGetErrorString.restype = ctypes.c_char_p
    rt.cudaGetErrorName.restype = ctypes.c_char_p
    ver = ctypes.c_int(0)
    rt.cudaRuntimeGetVersion(ctypes.byref(ver))
    v = f"{ver.value // 1000}.{(ver.value % 1000) // 10}"
    unknown = rt.cudaGetErrorName(ctypes.c_int(99999))
    for code in range(0, 1000):
        name = rt.cudaGetErrorName(ctypes.c_int(code))
        if not name or name == unknown:
            continue
        s = rt.cudaGetErrorString(ctypes.c_int(code)).decode()
        cat.add("cudart", "ERRSTR", s, v, f"cudaGetErrorString({code}) {name.decode()}")
    return [v]


def scan_pytorch_messages(cat, tsv):
    """Transcribed c10d/elastic messages: columns version, file, format (printf-style placeholders)."""
    versions = set()
    with open(tsv, encoding="utf-8") as f:
        for ln in f:
            if not ln.strip() or ln.startswith("#"):
                continue
            version, path, level, fmt = ln.rstrip("\n").split("\t", 3)
            cat.add("pytorch", level, fmt.replace("\\n", "\n"), version, path)
            versions.add(version)
    return sorted(versions, key=version_key)


PY_CALL = re.compile(r'\b(TORCH_CHECK|C10_THROW_ERROR|TORCH_WARN|LOG)\b|\bc10::str\s*\(|\bfmt::format\s*\(')


def scan_pytorch_dir(cat, root):
    """c10d C++ (c10::str / fmt::format / LOG pieces) and elastic Python f-strings; pieces become %s-joined."""
    files = []
    for sub in ["torch/csrc/distributed/c10d", "torch/distributed/elastic", "torch/distributed"]:
        d = os.path.join(root, sub)
        for dp, _, fs in os.walk(d):
            files += [os.path.join(dp, x) for x in fs if x.endswith((".cpp", ".hpp", ".py"))]
    for path in sorted(set(files)):
        rel = os.path.relpath(path, root)
        text = open(path, encoding="utf-8", errors="replace").read()
        if path.endswith(".py"):
            for m in re.finditer(r'(?:raise \w+|log(?:ger)?\.\w+|warnings\.warn)\(\s*((?:[rfb]*"(?:\\.|[^"\\])*"\s*)+)',
                                 text):
                pieces = re.findall(r'[rfb]*"((?:\\.|[^"\\])*)"', m.group(1))
                fmt = re.sub(r"\{[^{}]*\}", "%s", "".join(pieces))
                cat.add("pytorch", "LOG", fmt, "src", rel)
        else:
            for m in PY_CALL.finditer(text):
                seg = text[m.end():m.end() + 1500]
                stmt = seg.split(";", 1)[0]
                pieces = re.findall(r'"((?:\\.|[^"\\])*)"', stmt)
                if pieces:
                    fmt = "%s".join(c_unescape(p) for p in pieces)
                    fmt = re.sub(r"\{[^{}]*\}", "%s", fmt)
                    cat.add("pytorch", "LOG", fmt, "src", rel)
    return ["src"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nccl")
    ap.add_argument("--ofi")
    ap.add_argument("--rdma-core")
    ap.add_argument("--libfabric")
    ap.add_argument("--cudart")
    ap.add_argument("--pytorch", help="pytorch/pytorch checkout (optional)")
    ap.add_argument("--pytorch-messages", help="transcribed c10d/elastic messages TSV")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    cat, orders, notes = Catalog(), {}, []
    steps = [("nccl", a.nccl, scan_nccl), ("aws-ofi-nccl", a.ofi, scan_ofi), ("libfabric", a.libfabric, scan_libfabric),
             ("ibverbs", a.rdma_core, scan_rdma_core), ("cudart", a.cudart, scan_cudart),
             ("pytorch", a.pytorch_messages, scan_pytorch_messages)]
    if a.pytorch:
        steps.append(("pytorch", a.pytorch, scan_pytorch_dir))
    for source, arg, fn in steps:
        if not arg:
            print(f"gen_message_catalog: no input for {source}; skipped", file=sys.stderr)
            continue
        vers = fn(cat, arg)
        orders.setdefault(source, [])
        orders[source] = sorted(set(orders[source]) | set(vers), key=version_key)
        notes.append(f"# source {source}: {vers[0]} .. {vers[-1]} ({len(vers)} versions) from {os.path.basename(arg.rstrip('/'))}"
                     if vers else f"# source {source}: none")
    rows = cat.rows(orders)

    def esc(s):
        return s.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")

    with open(a.out, "w", encoding="utf-8") as f:
        f.write("# gpudoctor explain message catalog. Generated by scripts/gen_message_catalog.py; do not edit.\n")
        f.write("# columns: id, source, level, topic, versions, files, nccl_result, format (printf; \\t \\n \\\\ escaped)\n")
        for n in notes:
            f.write(n + "\n")
        for r in rows:
            f.write("\t".join(esc(x) for x in r) + "\n")
    print(f"gen_message_catalog: {len(rows)} messages -> {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
