"""Test harness for Keel: real Apache ZooKeeper 3.8 and Keel servers, raw
protocol client, kazoo extensions and trace normalisation."""

from .servers import (  # noqa: F401
    BaseServer, KeelServer, ZooKeeperServer, ServerStartError, make_server, free_port,
    four_letter_word, keel_available, make_workdir, KEEL_BIN, REPO_ROOT, WORK_ROOT,
    SUPER_DIGEST, SUPER_PASSWORD, ZK_CLIENT_CLASSPATH, ZKCLI, CLI_MT, JAVA_DIR,
)
