"""What the security suite needs beyond tests/harness: certificates made
with the `openssl` CLI, Keel and ZooKeeper 3.8 servers with a TLS client
port and SASL DIGEST-MD5 users, TLS four-letter words and raw sessions,
and the small Java client (java/SecureClient.java).

Servers are harness.servers' KeelServer / ZooKeeperServer with the extra
settings this suite uses (kept here, so the shared harness stays as it is):

  tls            a Pki bundle: turns the TLS client port on
  client_auth    "none" | "want" | "need"            (default "need")
  plain_port     False: no plain client port (Keel only)
  sasl_users     {"alice": "secret", ...}: the JAAS Server section
  require_sasl   True: sessions must authenticate with SASL
"""

import json
import os
import shutil
import socket
import ssl
import subprocess
import time

from harness import (JAVA_DIR, KeelServer, ZooKeeperServer, ZK_CLIENT_CLASSPATH, ZKCLI, free_port,
                     make_workdir)
from harness.zkproto import RawConnection

OPENSSL = shutil.which("openssl")
HERE = os.path.dirname(os.path.abspath(__file__))
JAVA_SOURCE = os.path.join(HERE, "java", "SecureClient.java")
# ZooKeeper's DIGEST-MD5 login module: what the JAAS files name.
DIGEST_LOGIN_MODULE = "org.apache.zookeeper.server.auth.DigestLoginModule"
SASL_PROVIDER = "org.apache.zookeeper.server.auth.SASLAuthenticationProvider"
# zookeeper.jar's manifest names netty's buffer, common, handler and
# transport jars; its Netty connection factory and client socket (TLS) also
# load these, from the same Debian package (libnetty-java).
NETTY_JARS = ":".join(os.path.join(JAVA_DIR, jar) for jar in (
    "netty-codec.jar", "netty-resolver.jar", "netty-transport-native-unix-common.jar"))
JAVA_CLIENT_CLASSPATH = ZK_CLIENT_CLASSPATH + ":" + NETTY_JARS
# Certificates live a day: long enough for any run, short enough to expire.
CERT_DAYS = 1


# ---------------------------------------------------------------- certificates
class Pki:
    """A directory of PEM files made with the openssl CLI: CAs, and
    certificates they issue (RSA 2048: ZooKeeper's PEM reader and every
    client read those). For `name`: name.pem (certificate), name.key
    (PKCS#8 key), name-combined.pem (key then certificate: ZooKeeper's PEM
    key store)."""

    def __init__(self, directory):
        self.dir = directory
        os.makedirs(directory, exist_ok=True)

    def path(self, name, suffix=".pem"):
        return os.path.join(self.dir, name + suffix)

    def _openssl(self, *args):
        subprocess.run([OPENSSL] + list(args), check=True, capture_output=True, timeout=60,
                       cwd=self.dir)

    def make_ca(self, name, common_name=None):
        self._openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", self.path(name, ".key"),
                      "-out", self.path(name), "-days", str(CERT_DAYS), "-subj", "/CN=%s" % (common_name or name),
                      "-addext", "basicConstraints=critical,CA:TRUE",
                      "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        return self.path(name)

    def issue(self, name, ca, common_name=None, san="IP:127.0.0.1,DNS:localhost"):
        """A leaf certificate for server and client use, signed by `ca`."""
        extensions = os.path.join(self.dir, name + ".ext")
        with open(extensions, "w") as f:
            f.write("basicConstraints=CA:FALSE\n"
                    "keyUsage=critical,digitalSignature,keyEncipherment\n"
                    "extendedKeyUsage=serverAuth,clientAuth\n"
                    "subjectAltName=%s\n" % san)
        csr = os.path.join(self.dir, name + ".csr")
        self._openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", self.path(name, ".key"),
                      "-out", csr, "-subj", "/CN=%s" % (common_name or name))
        self._openssl("x509", "-req", "-in", csr, "-CA", self.path(ca), "-CAkey", self.path(ca, ".key"),
                      "-set_serial", str(int(time.time() * 1000)), "-out", self.path(name),
                      "-days", str(CERT_DAYS), "-extfile", extensions)
        with open(self.path(name + "-combined"), "w") as out:
            for part in (self.path(name, ".key"), self.path(name)):
                with open(part) as f:
                    out.write(f.read())
        return self.path(name)

    @classmethod
    def standard(cls, directory):
        """CA `ca` issuing `server` and `client`; an unrelated CA `rogue`
        issuing `intruder` (a client certificate this server must refuse)."""
        pki = cls(directory)
        pki.make_ca("ca", "Keel Test CA")
        pki.issue("server", "ca", "keel-test-server")
        pki.issue("client", "ca", "keel-test-client")
        pki.make_ca("rogue", "Rogue CA")
        pki.issue("intruder", "rogue", "intruder")
        return pki


def client_context(pki, cert=None, ca="ca"):
    """A Python TLS client context trusting `ca`, verifying the server's
    certificate and host name, presenting `cert` (a name in `pki`) if given."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(pki.path(ca))
    context.check_hostname = True
    if cert:
        context.load_cert_chain(pki.path(cert), pki.path(cert, ".key"))
    return context


def tls_four_letter_word(port, word, context, timeout=5.0):
    """A four-letter word inside TLS; everything answered before the close."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            s.sendall(word.encode() if isinstance(word, str) else word)
            chunks = []
            while True:
                try:
                    b = s.recv(65536)
                except (ssl.SSLZeroReturnError, ConnectionResetError):
                    break
                if not b:
                    break
                chunks.append(b)
            return b"".join(chunks)


def tls_raw_connection(port, context, timeout=5.0):
    """harness.zkproto.RawConnection inside TLS."""
    conn = RawConnection(port, timeout=timeout)
    conn.sock = context.wrap_socket(conn.sock, server_hostname="127.0.0.1")
    return conn


def server_certificate(port, context, timeout=5.0):
    """The subject CN of the certificate the server presents now."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            subject = dict(item[0] for item in s.getpeercert()["subject"])
            return subject["commonName"]


def jaas_server_section(users):
    options = "\n".join('    user_%s="%s"' % (user, password) for user, password in sorted(users.items()))
    return "Server {\n  %s required\n%s;\n};\n" % (DIGEST_LOGIN_MODULE, options)


def jaas_client_section(user, password):
    return 'Client {\n  %s required\n  username="%s"\n  password="%s";\n};\n' % (
        DIGEST_LOGIN_MODULE, user, password)


# ---------------------------------------------------------------- servers
SECURITY_KEYS = ("tls", "client_auth", "plain_port", "sasl_users", "require_sasl")


class SecureKeelServer(KeelServer):
    TOML_KEYS = KeelServer.TOML_KEYS + tuple(
        k for k in ("secure_client_port", "tls_cert_file", "tls_key_file", "tls_ca_file", "tls_client_auth",
                    "sasl_users_file", "require_sasl")
        if k not in KeelServer.TOML_KEYS)

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.secure_port = free_port() if self.settings.get("tls") else None
        self.plain = self.settings.get("plain_port", True)

    def _prepare(self):
        s = self.settings
        pki = s.get("tls")
        keel = {}
        if pki:
            keel.update(secure_client_port=self.secure_port, tls_cert_file=pki.path("server"),
                        tls_key_file=pki.path("server", ".key"), tls_ca_file=pki.path("ca"),
                        tls_client_auth=s.get("client_auth", "need"))
        if s.get("sasl_users") is not None:
            path = os.path.join(self.workdir, "jaas.conf")
            with open(path, "w") as f:
                f.write(jaas_server_section(s["sasl_users"]))
            keel["sasl_users_file"] = path
        if s.get("require_sasl"):
            keel["require_sasl"] = True
        original = self.settings
        self.settings = {k: v for k, v in s.items() if k not in SECURITY_KEYS}
        self.settings.update(keel)
        try:
            super()._prepare()
        finally:
            self.settings = original

    def _command(self):
        command = super()._command()
        command[command.index("--client-port") + 1] = str(self.port if self.plain else 0)
        return command

    def is_ready(self):
        if self.plain and not super().is_ready():
            return False
        return secure_port_ready(self)


class SecureZooKeeperServer(ZooKeeperServer):
    """ZooKeeper 3.8 with a Netty secure client port (PEM key and trust
    stores) and/or SASL DIGEST-MD5 users in a JAAS Server section."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.secure_port = free_port() if self.settings.get("tls") else None

    def _prepare(self):
        super()._prepare()
        s = self.settings
        lines = []
        if s.get("tls"):
            # Without the address ZooKeeper binds the TLS port on 0.0.0.0.
            lines += ["secureClientPort=%d" % self.secure_port, "secureClientPortAddress=127.0.0.1",
                      "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory"]
        if s.get("sasl_users") is not None:
            lines.append("authProvider.1=%s" % SASL_PROVIDER)
        with open(self.config_path, "a") as f:
            f.write("\n".join(lines) + "\n")

    def is_ready(self):
        # ZooKeeper opens its secure port after the plain one.
        return super().is_ready() and secure_port_ready(self)

    def _command(self):
        s = self.settings
        props = dict(s.get("extra_system_properties", {}))
        pki = s.get("tls")
        if pki:
            props.update({
                "zookeeper.ssl.keyStore.location": pki.path("server-combined"),
                "zookeeper.ssl.keyStore.type": "PEM",
                "zookeeper.ssl.trustStore.location": pki.path("ca"),
                "zookeeper.ssl.trustStore.type": "PEM",
                "zookeeper.ssl.clientAuth": s.get("client_auth", "need"),
            })
        if s.get("sasl_users") is not None:
            path = os.path.join(self.workdir, "jaas.conf")
            with open(path, "w") as f:
                f.write(jaas_server_section(s["sasl_users"]))
            props["java.security.auth.login.config"] = path
        if s.get("require_sasl"):
            props["zookeeper.sessionRequireClientSASLAuth"] = "true"
        original = self.settings
        self.settings = dict(s, extra_system_properties=props)
        try:
            command = super()._command()
        finally:
            self.settings = original
        return with_netty_jars(command)


def with_netty_jars(command):
    """A ZooKeeper server's command line with the Netty jars its TLS (the
    Netty connection factory) loads added to its class path."""
    classpath = command.index("-cp") + 1
    command[classpath] += ":" + NETTY_JARS
    return command


def secure_port_ready(server):
    """True once the TLS port (if any) answers srvr inside TLS."""
    if not server.secure_port:
        return True
    context = client_context(server.settings["tls"], cert="client")
    try:
        srvr = tls_four_letter_word(server.secure_port, "srvr", context, timeout=1.0)
    except (ssl.SSLError, ConnectionResetError):
        return False
    return srvr.startswith(b"Zookeeper version:")


def make_secure_server(kind, **kw):
    return (SecureKeelServer if kind == "keel" else SecureZooKeeperServer)(**kw)


# ---------------------------------------------------------------- clients
def kazoo_client(server, pki=None, cert="client", sasl=None, timeout=15.0):
    """A KazooClient for `server`: over TLS (verifying the server's
    certificate and host name, presenting `cert`) when `pki` is given, with
    SASL DIGEST-MD5 when `sasl` = (user, password)."""
    from kazoo.client import KazooClient
    kw = {}
    if pki:
        kw.update(use_ssl=True, ca=pki.path("ca"), verify_certs=True, check_hostname=True)
        if cert:
            kw.update(certfile=pki.path(cert), keyfile=pki.path(cert, ".key"))
        hosts = "127.0.0.1:%d" % server.secure_port
    else:
        hosts = server.address
    if sasl:
        kw["sasl_options"] = {"mechanism": "DIGEST-MD5", "username": sasl[0], "password": sasl[1]}
    return KazooClient(hosts=hosts, timeout=timeout, connection_retry={"max_tries": 0}, **kw)


def compile_java(workdir):
    out = os.path.join(workdir, "classes")
    os.makedirs(out, exist_ok=True)
    subprocess.run(["javac", "-nowarn", "-d", out, "-cp", JAVA_CLIENT_CLASSPATH, JAVA_SOURCE],
                   check=True, capture_output=True, timeout=180)
    return out


def java_tls_properties(pki, cert="client"):
    props = {
        "zookeeper.client.secure": "true",
        "zookeeper.clientCnxnSocket": "org.apache.zookeeper.ClientCnxnSocketNetty",
        "zookeeper.ssl.trustStore.location": pki.path("ca"),
        "zookeeper.ssl.trustStore.type": "PEM",
    }
    if cert:
        props.update({"zookeeper.ssl.keyStore.location": pki.path(cert + "-combined"),
                      "zookeeper.ssl.keyStore.type": "PEM"})
    return props


def java_sasl_properties(workdir, user, password):
    path = os.path.join(workdir, "client-jaas-%s-%s.conf" % (user, abs(hash(password))))
    with open(path, "w") as f:
        f.write(jaas_client_section(user, password))
    return {"java.security.auth.login.config": path}


def run_java(classes, connect, wait_for, steps, properties, timeout=90):
    """Runs SecureClient: connects to `connect`, waits for the state
    `wait_for` (SyncConnected, SaslAuthenticated, AuthFailed), runs
    `steps`; returns its JSON lines as a list of dicts."""
    command = (["java", "-Xmx128m", "-XX:TieredStopAtLevel=1"]
               + ["-D%s=%s" % kv for kv in sorted(properties.items())]
               + ["-cp", JAVA_CLIENT_CLASSPATH + ":" + classes, "SecureClient", connect, wait_for] + steps)
    p = subprocess.run(command, capture_output=True, text=True, timeout=timeout, start_new_session=True)
    lines = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    # (the Closed event may print after "done")
    assert p.returncode == 0 and any(line.get("done") for line in lines), (
        "SecureClient failed (%d): %s\nstdout:\n%s\nstderr:\n%s" % (p.returncode, " ".join(command),
                                                                   p.stdout[-3000:], p.stderr[-3000:]))
    return lines


def java_results(lines):
    """{step: result} of SecureClient's output."""
    return {line["step"]: line["result"] for line in lines if "step" in line}


def java_events(lines):
    return [line["event"] for line in lines if "event" in line]


def zkcli(address, args, jvm_properties, timeout=90):
    """zkCli.sh one-shot command; its stdout + stderr. Debian's zkCli.sh
    puts only zookeeper.jar (and its manifest's jars) on the class path; a
    second -cp in CLIENT_JVMFLAGS (after its own) adds the Netty jars the
    TLS socket needs."""
    classpath = "/etc/zookeeper/conf:%s/zookeeper.jar:%s" % (JAVA_DIR, NETTY_JARS)
    flags = ["-cp", classpath, "-XX:TieredStopAtLevel=1", "-Xmx128m"] + ["-D%s=%s" % kv for kv in sorted(jvm_properties.items())]
    env = dict(os.environ, CLIENT_JVMFLAGS=" ".join(flags))
    p = subprocess.run([ZKCLI, "-server", address] + list(args), capture_output=True, text=True,
                       errors="replace", timeout=timeout, env=env, start_new_session=True)
    return p.stdout + p.stderr


def new_workdir(name):
    return make_workdir(name)
