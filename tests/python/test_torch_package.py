"""The commkit Python package's surface: version, backends, registration, topology advice."""

import json
import re
import subprocess
import sys

import torch.distributed as dist

import commkit


def test_version_and_registration():
    assert re.fullmatch(r"\d+\.\d+\.\d+", commkit.__version__)
    assert commkit.version() == commkit.__version__
    assert "COMMKIT" in dist.Backend._plugins
    assert "cpu" in dist.Backend.default_device_backend_map or True  # registration does not touch defaults
    assert dist.Backend("commkit") == "commkit"


def test_backends_lists_host_and_gloo():
    names = {b["name"]: b for b in commkit.backends()}
    assert names["host"]["available"], names
    assert "gloo" in names and "nccl" in names
    for b in names.values():
        assert set(b) == {"name", "available", "reason", "memory"}
        assert b["available"] or b["reason"], b


def test_set_host_backend_refuses_unknown_names():
    try:
        commkit.set_host_backend("carrier-pigeon")
    except ValueError as e:
        assert "carrier-pigeon" in str(e) and "host" in str(e)
    else:
        raise AssertionError("unknown backend accepted")


def test_topology_advice_is_a_dict():
    advice = commkit.topology_advice(master_addr="127.0.0.1")
    assert set(advice) >= {"settings", "findings"}
    json.dumps(advice)
    for s in advice["settings"]:
        assert {"variable", "value", "reason"} <= set(s)


def test_backend_info_needs_a_group():
    code = "import commkit\ntry:\n  commkit.backend_info()\nexcept RuntimeError as e:\n  print('refused:', e)\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "refused:" in out.stdout and "not initialized" in out.stdout, out


def test_import_keeps_signal_dispositions():
    """Loading commkit's native libraries must not take over signals: libinfinipath (linked through
    libfabric) installs SIGTERM/SIGSEGV/... handlers that call exit(), which corrupted the heap and hung
    a rank stopped with SIGTERM. The set of caught signals is the same before and after the import."""
    code = (
        "def caught():\n"
        "    for line in open('/proc/self/status'):\n"
        "        if line.startswith('SigCgt:'):\n"
        "            return int(line.split()[1], 16)\n"
        "import torch\n"
        "before = caught()\n"
        "import commkit\n"
        "print('before', hex(before), 'after', hex(caught()))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out
    words = out.stdout.split()
    assert words[0] == "before" and words[2] == "after", out.stdout
    assert words[1] == words[3], f"importing commkit changed the caught signals: {out.stdout}"
