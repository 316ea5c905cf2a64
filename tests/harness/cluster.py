"""Clusters: N Keel nodes or an N-member Apache ZooKeeper 3.8 ensemble on
127.0.0.1, started and stopped as one. The one way every suite, bench/compare.py
and `make cluster` start a cluster.

    group = make_cluster("keel", 3, settings={...})   # or "zookeeper"
    group.start()                 # every member up, one leader, the rest following
    group.leader()                # the member a majority of the voters follow
    group.wait_converged()        # every running member has the same tree (Keel)
    group.stop()                  # SIGTERM to all at once, SIGKILL after 15 s

KeelCluster(proxied=True) routes every directed peer link i->j through its own
TCP proxy (harness.proxy), so isolate(i)/heal(i) partition a node from the
others in both directions, cut(pairs) and partition(sides) cut any set of
links (majority/minority, a bridge node) and heal_all() restores them.

Command line (what `make cluster` / scripts/cluster.sh run), from the
repository root:

    PYTHONPATH=tests python3 -m harness.cluster up 3

starts three Keel nodes (client ports 2181.., peer ports 2888.., Prometheus
metrics on 7000.., data in ./keel-cluster/N, kept between runs) and keeps them
running until Ctrl-C or SIGTERM. Python 3 standard library only, no pytest at module level.
"""

import argparse
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import namedtuple

from .proxy import TcpProxy
from .servers import (
    KEEL_BIN, REPO_ROOT, KeelServer, ServerStartError, ZooKeeperServer, free_port, make_server, make_workdir,
    mntr, srvr_zxid,
)

Converged = namedtuple("Converged", "digest zxid seconds")

SERVING_STATES = ("leader", "follower", "observer")


class ServerGroup:
    """A replicated service of `size` members on 127.0.0.1, started and stopped
    as one. Where a test needs a server it can take a group instead:

      address   the connect string listing every member, in member order
                ("127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3"): what clients get;
      ports     every member's client port;
      port      the client port of one member, the *primary*: the first member
                that is a follower after the first start (fixed from then on).
                Raw-protocol connections and four-letter words go there;
      nodes     the member servers (KeelServer / ZooKeeperServer: start, stop,
                kill, restart, running, port, log_text... each on its own);
      start/stop/kill/restart/running/cleanup/log_tail  as for one server,
                applied to every member (stop returns 0 if every member exited
                with 0, else the first other exit status).

    leader(), wait_converged() and wait_replicated() are defined here once.
    """

    kind = "group"
    startup_timeout = 60.0

    def __init__(self, size=3, name=None, workdir=None, settings=None, test_defaults=True):
        self.size = size
        self.name = name or "%s%d" % (self.kind, size)
        self.workdir = workdir or make_workdir(self.name)
        os.makedirs(self.workdir, exist_ok=True)
        self.host = "127.0.0.1"
        self.test_defaults = test_defaults
        self.nodes = self._make_nodes(dict(settings or {}))
        self.primary_index = None

    def _make_nodes(self, settings):
        raise NotImplementedError

    def _node_workdir(self, i):
        return os.path.join(self.workdir, "node%d" % (i + 1))

    def _node_name(self, i):
        return "%s-n%d" % (self.name, i + 1)

    # ------------------------------------------------------------------
    @property
    def ports(self):
        return [n.port for n in self.nodes]

    @property
    def address(self):
        return ",".join(n.address for n in self.nodes)

    def connect_string(self, nodes=None):
        """The connect string of the given members (default: all) that are running."""
        return ",".join(n.address for n in (self.nodes if nodes is None else nodes) if n.running())

    @property
    def primary(self):
        return self.nodes[self.primary_index or 0]

    @property
    def port(self):
        return self.primary.port

    @property
    def settings(self):
        return self.nodes[0].settings

    def __repr__(self):
        return "<%s %s>" % (self.kind, self.address)

    def member_id(self, node):
        """The member's id in the group's configuration (1-based)."""
        return self.nodes.index(node) + 1

    def voters(self):
        """The members that vote (not observers)."""
        return list(self.nodes)

    def _each(self, fn, nodes=None):
        """fn(node) on every node in parallel; re-raise the first error."""
        errors = []

        def run(n):
            try:
                fn(n)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append((n, e))

        threads = [threading.Thread(target=run, args=(n,)) for n in (self.nodes if nodes is None else nodes)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        if errors:
            n, e = errors[0]
            raise ServerStartError("%s: %s: %s" % (self.name, n.name, e)) from e

    def start(self, timeout=None):
        """Start every member that is not running (in parallel), then wait
        until the group serves (wait_serving)."""
        timeout = timeout or self.startup_timeout
        try:
            self._each(lambda n: n.start(timeout) if not n.running() else None)
            self.wait_serving(timeout)
        except BaseException:
            self.kill()
            raise
        if self.primary_index is None:
            states = [mntr(p, 2.0).get("zk_server_state") for p in self.ports]
            self.primary_index = states.index("follower") if "follower" in states else 0
        return self

    def states(self, nodes=None):
        """Every member's mntr zk_server_state (None: no answer)."""
        return [mntr(n.port, 2.0).get("zk_server_state") for n in (self.nodes if nodes is None else nodes)]

    def wait_serving(self, timeout=30.0):
        """Until one member is leader and every other one a follower/observer;
        returns the states in member order."""
        deadline = time.monotonic() + timeout
        states = []
        while time.monotonic() < deadline:
            states = self.states()
            if states.count("leader") == 1 and all(s in SERVING_STATES for s in states):
                return states
            time.sleep(0.05)
        raise ServerStartError("%s: no leader with every member following within %.0fs (states %r)\n%s"
                               % (self.name, timeout, states, self.log_tail(40)))

    # ------------------------------------------------------------------ leader
    def _leader_once(self):
        """One look at every running member: the leader, or None, and what was
        seen. A member leads if it says so (mntr zk_server_state "leader") and a
        majority of the voting members (itself included) follow it: Keel
        members report the same keel_raft_term and keel_raft_leader_id = its
        id; ZooKeeper members, which name no leader in mntr, report
        leader/follower while no other member claims to lead. Of two claimants
        (an old leader that has not yet stepped down) the one of the higher
        term wins, if a majority follows it."""
        running = [n for n in self.nodes if n.running()]
        seen = {n: mntr(n.port) for n in running}
        voters = set(self.voters())
        majority = len(voters) // 2 + 1
        claimants = [n for n, s in seen.items() if s.get("zk_server_state") == "leader"]
        best, best_term = None, -1
        for c in claimants:
            term = seen[c].get("keel_raft_term")
            if term is not None:  # Keel: count who follows c in c's term
                view = (term, str(self.member_id(c)))
                votes = sum(1 for n, s in seen.items()
                            if n in voters and (s.get("keel_raft_term"), s.get("keel_raft_leader_id")) == view)
                term = int(term)
            else:  # ZooKeeper: one claimant, a majority in the ensemble
                votes = (sum(1 for n, s in seen.items() if n in voters and s.get("zk_server_state") in
                             ("leader", "follower")) if len(claimants) == 1 else 0)
                term = 0
            if votes >= majority and term > best_term:
                best, best_term = c, term
        return best, seen

    def leader(self, timeout=15.0):
        """The member that leads, agreed by a majority of the voters (see
        _leader_once), waiting up to `timeout` s; AssertionError otherwise."""
        end = time.monotonic() + timeout
        seen = {}
        while True:
            found, seen = self._leader_once()
            if found is not None:
                return found
            if time.monotonic() >= end:
                break
            time.sleep(0.05)
        raise AssertionError("%s: no leader agreed by a majority within %.0fs: %r" % (
            self.name, timeout, [(n.name, s.get("zk_server_state"), s.get("keel_raft_term"),
                                  s.get("keel_raft_leader_id")) for n, s in seen.items()]))

    # ------------------------------------------------------------------ convergence
    def _replica_view(self, node):
        """What must be equal on every replica once they converge."""
        raise NotImplementedError

    def converged(self, nodes=None):
        """One look: the common view if the given members (default: the
        running ones) all report the same one, else None (see _replica_view)."""
        nodes = [n for n in self.nodes if n.running()] if nodes is None else nodes
        views = {self._replica_view(n) for n in nodes}
        if len(views) == 1:
            view = next(iter(views))
            if None not in view:
                return view
        return None

    def wait_converged(self, timeout=30.0, nodes=None):
        """Until the given (default: running) members report the same tree
        (Keel: mntr keel_tree_digest and keel_last_zxid); returns
        Converged(digest, zxid, seconds waited); AssertionError after `timeout`."""
        started = time.monotonic()
        while True:
            view = self.converged(nodes)
            if view is not None:
                return Converged(view[0], view[1], time.monotonic() - started)
            if time.monotonic() >= started + timeout:
                break
            time.sleep(0.05)
        shown = [n for n in self.nodes if n.running()] if nodes is None else nodes
        states = [(n, mntr(n.port)) for n in shown]
        raise AssertionError("%s: replicas did not converge within %.0fs: %r" % (
            self.name, timeout, [(n.name, s.get("keel_tree_digest"), s.get("keel_last_zxid"),
                                  s.get("keel_raft_applied_index")) for n, s in states]))

    def wait_replicated(self, timeout=10.0):
        """Until every member has applied at least the highest zxid any member
        had applied when this was called (srvr's Zxid): after it, a fresh
        session sees every write acknowledged before the call, whichever member
        it lands on (what `sync` gives one session, for clients that cannot
        sync, e.g. one-shot zkCli.sh processes). Works while writes go on,
        unlike wait_converged, and for ZooKeeper too."""
        deadline = time.monotonic() + timeout
        target = max(z for z in (srvr_zxid(p) for p in self.ports) if z is not None)
        if target & 0xFFFFFFFF == 0:
            # No transaction in the leader's epoch yet (a ZooKeeper leader
            # reports the epoch's zxid 0xE00000000, a follower that has only
            # synced may still print an older one): nothing new to apply.
            return target
        zxids = []
        while time.monotonic() < deadline:
            zxids = [srvr_zxid(p) for p in self.ports]
            if all(z is not None and z >= target for z in zxids):
                return target
            time.sleep(0.02)
        raise AssertionError("%s: members did not reach zxid 0x%x within %.0fs: %r"
                             % (self.name, target, timeout, zxids))

    # ------------------------------------------------------------------ processes
    def running(self):
        return all(n.running() for n in self.nodes)

    def stop(self, timeout=15.0):
        """SIGTERM to every member at once (one loop, no member is left
        serving while the others go: a client would move to it), then wait
        for each, SIGKILL after `timeout`."""
        running = [n for n in self.nodes if n.running()]
        for n in running:
            n._signal_group(signal.SIGTERM)
        codes = {}

        def wait(n):
            try:
                n.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                n._signal_group(signal.SIGKILL)
                n.proc.wait(10)
            n._signal_group(signal.SIGKILL)  # stragglers in the group
            n._closed()
            codes[n.name] = n.proc.returncode

        try:
            self._each(wait, running)
        finally:
            self._stopped()
        bad = [codes[n.name] for n in running if codes.get(n.name) not in (0, None)]
        return bad[0] if bad else 0

    def kill(self):
        for n in self.nodes:
            try:
                n.kill()
            except Exception:
                pass
        self._stopped()

    def _stopped(self):
        pass

    def restart(self, timeout=None):
        self.stop()
        return self.start(timeout)

    def cleanup(self):
        shutil.rmtree(self.workdir, ignore_errors=True)

    def log_text(self):
        return "\n".join(n.log_text() for n in self.nodes)

    def log_tail(self, n=200):
        return "\n".join(node.log_tail(max(20, n // len(self.nodes))) for node in self.nodes)

    def __enter__(self):
        return self.start() if not self.running() else self

    def __exit__(self, *exc):
        self.stop()


class KeelCluster(ServerGroup):
    """`size` Keel nodes (`--id`, `--peers` with peer ports on 127.0.0.1); the
    same settings as a single KeelServer otherwise (`observers`,
    `preferred_leader` are settings too).

    proxied=True: every directed peer link i->j goes through its own TCP
    proxy (node i names proxy (i, j) as peer j), so isolate(i) cuts node i off
    from the others in both directions and heal(i) reconnects it.
    client_ports / peer_ports fix the ports (default: free ones); data_dirs
    puts node i's data dir there instead of in its work dir. node_settings,
    a function of the member id (1-based), adds settings of that member
    alone (its own TLS certificate: harness.peer_auth.peer_auth_settings).
    metrics_ports
    turns on node i's Prometheus endpoint at metrics_ports[i] (default off;
    metrics_ports=True: free ports)."""

    kind = "keel-cluster"

    def __init__(self, size=3, name=None, workdir=None, settings=None, binary=None, proxied=False,
                 client_ports=None, peer_ports=None, data_dirs=None, node_workdirs=None, test_defaults=True,
                 node_settings=None, metrics_ports=None):
        self.binary = binary
        self._node_settings = node_settings or (lambda member_id: {})
        if metrics_ports is True:
            metrics_ports = [free_port() for _ in range(size)]
        self.metrics_ports = list(metrics_ports) if metrics_ports else None
        self.proxied = proxied
        self.links = {}
        self._client_ports = client_ports
        self._peer_ports = peer_ports
        self._data_dirs = data_dirs
        self._node_workdirs = node_workdirs
        super().__init__(size, name, workdir, settings, test_defaults)

    def _make_nodes(self, settings):
        listen = list(self._peer_ports or [free_port() for _ in range(self.size)])
        clients = list(self._client_ports or [free_port() for _ in range(self.size)])
        if self.proxied:
            self.links = {(i, j): TcpProxy(listen[j]) for i in range(self.size) for j in range(self.size) if i != j}
        nodes = []
        for i in range(self.size):
            # Each entry names the member's client port too (ZooKeeper's
            # ";client" part): /zookeeper/config shows it.
            peers = ",".join("%d=127.0.0.1:%d;127.0.0.1:%d" % (
                j + 1, self.links[(i, j)].port if (i, j) in self.links else listen[j], clients[j])
                for j in range(self.size))
            node_settings = dict(settings, server_id=i + 1, peers=peers, **self._node_settings(i + 1))
            if self.metrics_ports:
                node_settings["metrics_port"] = self.metrics_ports[i]
            nodes.append(KeelServer(
                name=self._node_name(i),
                workdir=self._node_workdirs[i] if self._node_workdirs else self._node_workdir(i),
                binary=self.binary, test_defaults=self.test_defaults,
                port=clients[i],
                data_dir=self._data_dirs[i] if self._data_dirs else None,
                settings=node_settings))
        return nodes

    def member_id(self, node):
        return int(node.settings["server_id"])

    def voters(self):
        observers = set(self.settings.get("observers") or ())
        return [n for n in self.nodes if self.member_id(n) not in observers]

    def _replica_view(self, node):
        s = mntr(node.port)
        return (s.get("keel_tree_digest"), s.get("keel_last_zxid"))

    def start(self, timeout=None):
        for link in self.links.values():
            if not link.listening:
                link.start()
        return super().start(timeout)

    def isolate(self, index):
        """Cut every peer link from and to node `index` (0-based)."""
        assert self.proxied, "isolate() needs KeelCluster(proxied=True)"
        for (i, j), link in self.links.items():
            if index in (i, j):
                link.cut()

    def heal(self, index):
        """Reconnect node `index`'s peer links."""
        assert self.proxied, "heal() needs KeelCluster(proxied=True)"
        for (i, j), link in self.links.items():
            if index in (i, j) and not link.listening:
                link.resume()

    def cut(self, pairs):
        """Cut the peer links between each (i, j) of `pairs` (0-based), both
        directions."""
        assert self.proxied, "cut() needs KeelCluster(proxied=True)"
        for i, j in pairs:
            for link in (self.links[(i, j)], self.links[(j, i)]):
                if link.listening:
                    link.cut()

    def partition(self, sides):
        """Cut every peer link between members of different `sides` (lists
        of 0-based indexes; a member in no side keeps all its links, e.g.
        the bridge of [[0], [2]] in a 3-node cluster)."""
        side_of = {i: k for k, side in enumerate(sides) for i in side}
        self.cut([(i, j) for i in side_of for j in side_of
                  if i < j and side_of[i] != side_of[j]])

    def heal_all(self):
        """Reconnect every peer link."""
        assert self.proxied, "heal_all() needs KeelCluster(proxied=True)"
        for link in self.links.values():
            if not link.listening:
                link.resume()

    def _stopped(self):
        for link in self.links.values():
            link.close()


class ZooKeeperEnsembleMember(ZooKeeperServer):
    """One member of a ZooKeeper 3.8 ensemble (QuorumPeerMain, static config)."""

    kind = "zookeeper-member"

    def __init__(self, *a, myid, servers_lines, **kw):
        super().__init__(*a, **kw)
        self.myid = myid
        self.servers_lines = servers_lines

    def _prepare(self):
        super()._prepare()
        with open(self.config_path, "a") as f:
            f.write("initLimit=10\nsyncLimit=5\n" + "\n".join(self.servers_lines) + "\n")
        with open(os.path.join(self.data_dir, "myid"), "w") as f:
            f.write("%d\n" % self.myid)

    def _command(self):
        return [("org.apache.zookeeper.server.quorum.QuorumPeerMain"
                 if x == "org.apache.zookeeper.server.ZooKeeperServerMain" else x)
                for x in super()._command()]


class ZooKeeperEnsemble(ServerGroup):
    """`size` Apache ZooKeeper 3.8 servers forming an ensemble on 127.0.0.1
    (quorum and election ports bound on 127.0.0.1 too)."""

    kind = "zookeeper-ensemble"
    # What each member is (a subclass may add to it: bench/zk_tls.py).
    member_class = ZooKeeperEnsembleMember

    def _make_nodes(self, settings):
        client_ports = [free_port() for _ in range(self.size)]
        lines = ["server.%d=127.0.0.1:%d:%d;127.0.0.1:%d" % (i + 1, free_port(), free_port(), client_ports[i])
                 for i in range(self.size)]
        return [self.member_class(name=self._node_name(i), workdir=self._node_workdir(i),
                                  settings=settings, port=client_ports[i], myid=i + 1,
                                  servers_lines=lines, test_defaults=self.test_defaults)
                for i in range(self.size)]

    def member_id(self, node):
        return node.myid

    def _replica_view(self, node):
        raise NotImplementedError("ZooKeeper's mntr has no tree digest (and an idle follower may report an "
                                  "older zxid than its leader): use wait_replicated()")


TOPOLOGIES = {"single": 1, "cluster3": 3}


def make_cluster(kind, size=3, **kw):
    """A not yet started group: a Keel cluster or a ZooKeeper ensemble."""
    if kind == "keel":
        return KeelCluster(size, **kw)
    if kind == "zookeeper":
        return ZooKeeperEnsemble(size, **kw)
    raise ValueError(kind)


def make_topology(kind, topology="single", **kw):
    """make_server(kind) for "single", make_cluster(kind, 3) for "cluster3"."""
    if topology == "single":
        return make_server(kind, **kw)
    return make_cluster(kind, TOPOLOGIES[topology], **kw)


# ---------------------------------------------------------------- command line
def _up(args):
    """`make cluster`: fixed ports, data in ./keel-cluster/N (kept), Keel's own
    defaults (only every four-letter word allowed) with Prometheus metrics on
    --metrics-port.. (7000.., 0 = off), until Ctrl-C/SIGTERM."""
    n = args.nodes
    data_root = os.path.abspath(args.data)
    dirs = [os.path.join(data_root, str(i + 1)) for i in range(n)]
    settings, node_settings = {"four_letter_words": ["*"]}, None
    if args.peer_tls or args.peer_secret:
        from .peer_auth import peer_auth_settings
        auth, node_settings = peer_auth_settings(os.path.join(data_root, "peer-auth"), n,
                                                 tls=args.peer_tls, secret=args.peer_secret)
        settings.update(auth)
    cluster = KeelCluster(
        n, name="keel-cluster", workdir=data_root, binary=args.binary, test_defaults=False,
        settings=settings, node_settings=node_settings,
        client_ports=[args.client_port + i for i in range(n)],
        peer_ports=[args.peer_port + i for i in range(n)],
        data_dirs=dirs, node_workdirs=dirs,
        metrics_ports=[args.metrics_port + i for i in range(n)] if args.metrics_port else None)
    for node in cluster.nodes:
        # the log of the last run only, as before (keel-cluster/N/server.log)
        try:
            os.remove(node.log_path)
        except OSError:
            pass

    def on_signal(signum, _frame):
        raise KeyboardInterrupt("signal %d" % signum)

    # SIGINT too: a shell without job control starts background commands
    # with SIGINT ignored, and Python then keeps it ignored.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    first, last = args.client_port, args.client_port + n - 1
    rel = os.path.relpath(data_root)
    try:
        cluster.start()
        print("keel cluster: %d nodes, clients on 127.0.0.1:%d..%d, logs in %s/N/server.log"
              % (n, first, last, rel), flush=True)
        print("connect string: %s" % cluster.address, flush=True)
        if args.metrics_port:
            print("prometheus metrics: http://127.0.0.1:%d..%d/metrics"
                  % (args.metrics_port, args.metrics_port + n - 1), flush=True)
        # Like the shell script it replaces: a node that exits (e.g. killed
        # by hand to try a failover) is reported, the others keep running
        # until Ctrl-C or until none is left.
        reported = set()
        while True:
            for node in cluster.nodes:
                if not node.running() and node not in reported:
                    reported.add(node)
                    print("node %d exited (code %s); see %s" % (cluster.member_id(node), node.proc.returncode,
                                                               os.path.relpath(node.log_path)), flush=True)
            if len(reported) == len(cluster.nodes):
                return 1
            time.sleep(0.5)
    except KeyboardInterrupt:
        return 0
    except ServerStartError as e:
        print("keel cluster did not start: %s" % e, file=sys.stderr, flush=True)
        return 1
    finally:
        cluster.stop()


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m harness.cluster",
                                 description="Run a local Keel cluster on 127.0.0.1 until Ctrl-C.")
    sub = ap.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start NODES Keel nodes and keep them running until Ctrl-C/SIGTERM")
    up.add_argument("nodes", nargs="?", type=int, default=3)
    up.add_argument("--keep-data", action="store_true", help="accepted for compatibility: data is always kept")
    up.add_argument("--client-port", type=int, default=2181, help="first client port (default 2181)")
    up.add_argument("--peer-port", type=int, default=2888, help="first peer port (default 2888)")
    up.add_argument("--metrics-port", type=int, default=7000,
                    help="first Prometheus metrics port (default 7000; 0 = off)")
    up.add_argument("--data", default=os.path.join(REPO_ROOT, "keel-cluster"),
                    help="data root: node N uses DATA/N (default ./keel-cluster)")
    up.add_argument("--binary", default=KEEL_BIN)
    up.add_argument("--peer-tls", action="store_true",
                    help="peers talk mutual TLS (a CA and certificates made in DATA/peer-auth)")
    up.add_argument("--peer-secret", action="store_true",
                    help="peers prove a shared secret (made in DATA/peer-auth/peer.secret)")
    args = ap.parse_args(argv)
    if args.command == "up":
        return _up(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
