"""Test harness for Keel: real Apache ZooKeeper 3.8 and Keel servers
(servers.py), clusters and ensembles of them (cluster.py), TCP proxies
(proxy.py), raw protocol client, kazoo extensions and trace normalisation.
Import clusters from harness.cluster (not re-exported here, so that
`python3 -m harness.cluster` runs it as the one copy of that module).

servers, cluster and proxy use the Python 3 standard library only (no
pytest, no kazoo), so bench/compare.py and `python3 -m harness.cluster`
(`make cluster`) use them outside the test venv."""

from .servers import (  # noqa: F401
    BaseServer, KeelServer, ZooKeeperServer, ServerStartError, make_server, free_port,
    dir_bytes, four_letter_word, keel_available, make_workdir, mntr, raft_applied_index, rss_bytes, run_bench, scrape,
    server_state, snapshot_files, srvr_zxid,
    KEEL_BIN, REPO_ROOT, WORK_ROOT,
    SUPER_DIGEST, SUPER_PASSWORD, ZK_CLIENT_CLASSPATH, ZKCLI, CLI_MT, JAVA_DIR,
)
