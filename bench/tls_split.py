#!/usr/bin/env python3
"""Where Keel's TLS cost sits: four 3-node clusters in one run that differ
only in where TLS is on (none, peer links only, client port only, both),
each driven by `keel bench` for DURATION seconds, two rounds; prints TPS
and p50 per cluster. Certificates come from tests/harness/peer_auth.py.

Usage: python3 bench/tls_split.py [WORKLOAD [CLIENTS [DURATION]]]
       (default: create 400 12). Run it on a quiet machine.
"""

import os
import subprocess
import sys
import tempfile

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(REPO, "bench"))
sys.path.insert(0, os.path.join(REPO, "tests"))

import compare  # noqa: E402
from harness.peer_auth import peer_auth_settings  # noqa: E402
from harness.servers import KEEL_BIN, free_port  # noqa: E402

MODES = ("none", "peer", "client", "both")
ROUNDS = 2


def start(mode, root):
    """A serving cluster; (group, bench address, bench TLS flags)."""
    settings, member = peer_auth_settings(os.path.join(root, "pki"), 3, tls=True,
                                          extra_san="IP:127.0.0.1")
    settings = dict(compare.SETTINGS["keel"], tls_client_auth="none", **settings)
    if mode in ("client", "none"):
        settings["peer_tls"] = False
    ports = {i: free_port() for i in (1, 2, 3)}

    def node_settings(member_id):
        node = dict(member(member_id))
        if mode in ("client", "both"):
            node["secure_client_port"] = ports[member_id]
        return node

    group = compare.make_cluster("keel", 3, name="keel-tls-" + mode, workdir=os.path.join(root, mode),
                                 settings=settings, node_settings=node_settings, test_defaults=False)
    compare._groups.append(group)
    group.start(timeout=120)
    group.leader(timeout=30)
    if mode in ("client", "both"):
        return group, ",".join("127.0.0.1:%d" % ports[i] for i in (1, 2, 3)), ["--tls-ca", settings["tls_ca_file"]]
    return group, group.address, []


def main():
    workload = sys.argv[1] if len(sys.argv) > 1 else "create"
    clients = sys.argv[2] if len(sys.argv) > 2 else "400"
    duration = sys.argv[3] if len(sys.argv) > 3 else "12"
    print("TLS on   round  TPS        p50")
    for round_number in range(1, ROUNDS + 1):
        for mode in MODES:
            root = tempfile.mkdtemp(prefix="tls-split-")
            group, address, flags = start(mode, root)
            try:
                run = subprocess.run([KEEL_BIN, "bench", "--servers", address, "--workload", workload,
                                      "--clients", clients, "--duration", duration] + flags,
                                     capture_output=True, text=True, check=True)
                lines = dict(line.split(None, 1) for line in run.stdout.splitlines() if line.startswith(("TPS", "p50")))
                print("%-8s %5d  %-10s %s" % (mode, round_number, lines.get("TPS", "?").strip(),
                                             lines.get("p50", "?").replace("latency", "").strip()), flush=True)
            finally:
                compare.stop_all()
                compare._groups.clear()


if __name__ == "__main__":
    main()
