#!/usr/bin/env python3
"""Drives the kazoo Python client through a few operations via
capture_proxy.py, so the golden vectors also cover a non-Java client.

Usage: kazoo_driver.py PROXY_HOST:PORT CONTROL_PORT   (needs `pip install kazoo`)
"""

import socket
import sys

from kazoo.client import KazooClient


class Control:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.file = self.sock.makefile("rw")

    def command(self, line):
        self.file.write(line + "\n")
        self.file.flush()
        answer = self.file.readline().strip()
        if answer != "ok":
            raise RuntimeError("%s -> %s" % (line, answer))

    def label(self, name):
        self.command("label " + name)

    def wait(self, name):
        self.command("wait " + name)


def main():
    server, control_port = sys.argv[1], int(sys.argv[2])
    ctl = Control(control_port)
    zk = KazooClient(hosts=server, timeout=10.0)
    ctl.label("kazoo_connect")
    zk.start()
    ctl.wait("kazoo_connect")
    ctl.label("kazoo_create")
    zk.create("/kazoo", b"k")
    ctl.label("kazoo_create_ephemeral_sequential")
    zk.create("/kazoo/e-", b"", ephemeral=True, sequence=True)
    ctl.label("kazoo_get_data")
    zk.get("/kazoo")
    ctl.label("kazoo_set_data")
    zk.set("/kazoo", b"k2")
    ctl.label("kazoo_get_children")
    zk.get_children("/kazoo")
    ctl.label("kazoo_get_children2")
    zk.get_children("/kazoo", include_data=True)
    ctl.label("kazoo_exists_nonode")
    zk.exists("/kazoo/missing")
    ctl.wait("kazoo_exists_nonode")
    ctl.label("kazoo_sync")
    zk.sync("/kazoo")
    ctl.label("kazoo_multi")
    tx = zk.transaction()
    tx.create("/kazoo/t", b"t")
    tx.check("/kazoo", 1)
    tx.set_data("/kazoo/t", b"t2")
    tx.delete("/kazoo/t")
    tx.commit()
    ctl.label("kazoo_create_null_data")
    zk.create("/kazoo/d", None)
    ctl.label("kazoo_delete")
    zk.delete("/kazoo/d")
    ctl.label("kazoo_close_session")
    zk.stop()
    ctl.wait("kazoo_close_session")
    zk.close()
    print("kazoo driver done")


if __name__ == "__main__":
    main()
