"""ClickHouse's own ZooKeeper client, driven through chDB (ClickHouse 26.9
embedded in Python): run by tests/compat/test_clickhouse_compat.py with the
Python of .deps/chdb-venv, never imported by pytest.

    clickhouse_scenario.py DB_DIR CONFIG_XML

CONFIG_XML names the servers (<zookeeper>) and the macros. DDL of
replicated tables: each creates its table's and its replica's znodes (one
large multi), a drop removes them (on a server that announces the
extension in /keeper/feature_flags, with removeRecursive). chDB starts no
replica's background threads, so a replica stays read-only: no inserts or
ALTERs (their refusal is compared too). Prints one JSON line per
statement; exits with os._exit, past chDB's own teardown."""

import json
import os
import sys

import chdb

STATEMENTS = (
    "CREATE TABLE a (k UInt64, v String) ENGINE = ReplicatedMergeTree('/clickhouse/tables/a', 'r1') ORDER BY k",
    "CREATE TABLE b (k UInt64) ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/b', '{replica}') "
    "ORDER BY k PARTITION BY k % 4",
    "CREATE TABLE c (k UInt64) ENGINE = ReplicatedMergeTree('/clickhouse/tables/c', 'r1') ORDER BY k",
    "CREATE TABLE c2 (k UInt64) ENGINE = ReplicatedMergeTree('/clickhouse/tables/c', 'r2') ORDER BY k",
    "DROP TABLE c SYNC",
    "SELECT database, table, replica_path FROM system.replicas ORDER BY table",
    "DETACH TABLE a",
    "ATTACH TABLE a",
    "ALTER TABLE b ADD COLUMN v String",
    "CREATE TABLE d (k UInt64) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/d', 'r1') ORDER BY k",
    "SYSTEM DROP REPLICA 'r9' FROM ZKPATH '/clickhouse/tables/d'",
    "DROP TABLE d SYNC",
    "DROP TABLE c2 SYNC",
    "SELECT database, table, replica_path FROM system.replicas ORDER BY table",
)


def main():
    db, config = sys.argv[1], sys.argv[2]
    connection = chdb.connect("file:%s?config-file=%s" % (db, config))
    cursor = connection.cursor()
    for sql in STATEMENTS:
        try:
            cursor.execute(sql)
            out = {"sql": sql, "rows": [[str(v) for v in row] for row in cursor.fetchall()]}
        except Exception as error:  # ClickHouse's refusal, compared as text
            out = {"sql": sql, "error": str(error).split(" (", 1)[0]}
        print(json.dumps(out), flush=True)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
