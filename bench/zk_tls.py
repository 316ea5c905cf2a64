"""A 3-member Apache ZooKeeper 3.8 ensemble with TLS on its client ports
and between its members, from Debian's jars (zookeeper, libnetty-java):
`make compare`'s `zookeeper-tls` system, the ZooKeeper side of Keel's
`keel-tls`.

- Client ports: `secureClientPort` beside the plain `clientPort` (the
  harness checks readiness and leadership over the plain one), served by
  the Netty connection factory, which TLS needs. No client certificate is
  asked (`zookeeper.ssl.clientAuth=none`), as Keel's `tls_client_auth =
  "none"` in `keel-tls`.
- Member links: `sslQuorum=true`, with the same certificate as key store
  and the same CA as trust store.
- TLS 1.3 on both (ZooKeeper 3.8's default is TLS 1.2; Keel's rustls
  prefers 1.3), so both systems pay for the same protocol.
- Certificates: tests/security/secure.py's `Pki` (openssl CLI, RSA 2048,
  the PEM stores ZooKeeper reads), naming 127.0.0.1 for the bench to verify.

Python 3 standard library only (plus the test suites' harness).
"""

import os

from harness.cluster import ZooKeeperEnsemble, ZooKeeperEnsembleMember
from harness.servers import JAVA_DIR, free_port
from security.secure import NETTY_JARS, Pki, with_netty_jars

TLS_PROTOCOL = "TLSv1.3"
# ZooKeeper 3.8's default cipher list has TLS 1.2 suites only: with TLS 1.3
# alone enabled, no handshake would find a suite ("No appropriate protocol").
# AES-256 first: what keel bench's rustls asks first, and so what Keel's
# TLS port (which follows the client's order) uses in `keel-tls`.
TLS13_CIPHER_SUITES = "TLS_AES_256_GCM_SHA384,TLS_AES_128_GCM_SHA256"


# zookeeper.jar's Netty factory loads these besides the jars its manifest
# names (netty buffer, common, handler, transport).
NETTY_JAR_NAMES = ("netty-buffer.jar", "netty-common.jar", "netty-handler.jar", "netty-transport.jar")


def missing_jars():
    """The Netty jars ZooKeeper's TLS needs that this machine lacks (Debian:
    libnetty-java, which the zookeeper package pulls in)."""
    return [path for path in NETTY_JARS.split(":") + [os.path.join(JAVA_DIR, name) for name in NETTY_JAR_NAMES]
            if not os.path.isfile(path)]


def make_pki(directory):
    """A CA and one certificate every member uses (`server`)."""
    pki = Pki(directory)
    pki.make_ca("ca", "Keel compare CA")
    pki.issue("server", "ca", "zookeeper-compare")
    return pki


def tls_properties(pki):
    """The Java system properties of every member: client-port and quorum
    TLS, PEM stores."""
    props = {}
    for prefix in ("zookeeper.ssl.", "zookeeper.ssl.quorum."):
        props.update({
            prefix + "keyStore.location": pki.path("server-combined"),
            prefix + "keyStore.type": "PEM",
            prefix + "trustStore.location": pki.path("ca"),
            prefix + "trustStore.type": "PEM",
            prefix + "protocol": TLS_PROTOCOL,
            prefix + "enabledProtocols": TLS_PROTOCOL,
            prefix + "ciphersuites": TLS13_CIPHER_SUITES,
        })
    props["zookeeper.ssl.clientAuth"] = "none"
    return props


class TlsEnsembleMember(ZooKeeperEnsembleMember):
    """An ensemble member with a Netty TLS client port and quorum TLS."""

    kind = "zookeeper-tls-member"

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.secure_port = free_port()

    def _prepare(self):
        super()._prepare()
        with open(self.config_path, "a") as f:
            f.write("secureClientPort=%d\n"
                    "secureClientPortAddress=127.0.0.1\n"
                    "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n"
                    "sslQuorum=true\n" % self.secure_port)

    def _command(self):
        return with_netty_jars(super()._command())


class TlsEnsemble(ZooKeeperEnsemble):
    """`size` TlsEnsembleMembers; `pki` as made by make_pki()."""

    kind = "zookeeper-tls-ensemble"
    member_class = TlsEnsembleMember

    def __init__(self, size, pki, settings=None, **kw):
        settings = dict(settings or {})
        props = dict(settings.get("extra_system_properties", {}))
        props.update(tls_properties(pki))
        settings["extra_system_properties"] = props
        self.pki = pki
        super().__init__(size, settings=settings, **kw)

    @property
    def tls_address(self):
        """The members' TLS client ports, as keel bench's --servers."""
        return ",".join("127.0.0.1:%d" % node.secure_port for node in self.nodes)


def make_group(root, settings):
    """A TlsEnsemble under `root`, not yet started; its `bench_address` and
    `bench_flags` are what keel bench connects with (the TLS ports, the CA)."""
    pki = make_pki(os.path.join(root, "zookeeper-tls-pki"))
    group = TlsEnsemble(3, pki, name="zookeeper-tls", workdir=os.path.join(root, "zookeeper-tls"),
                        settings=settings, test_defaults=False)
    group.bench_address = group.tls_address
    group.bench_flags = ["--tls-ca", pki.path("ca")]
    return group
