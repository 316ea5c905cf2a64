"""Material for authenticated Keel peers: a shared secret file
(`peer_secret_file`) and a CA with one certificate per member
(`peer_tls`: the DNS subject alternative name keel-member-<id>), made with
the openssl command line, and the settings that start a KeelCluster with
them:

    settings, node_settings = peer_auth_settings(directory, 3, tls=True, secret=True)
    KeelCluster(3, settings=settings, node_settings=node_settings).start()

Python 3 standard library plus the `openssl` program (Debian: openssl)."""

import os
import secrets
import subprocess

# Certificates made for tests live this long.
CERT_DAYS = 30


def _openssl(*args, cwd):
    done = subprocess.run(["openssl"] + list(args), cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError("openssl %s failed: %s" % (" ".join(args), done.stderr.strip()))


def make_peer_secret(path):
    """A shared secret file as README's "Securing Keel" makes it: 32 random
    bytes in hex (64 characters), readable by its owner only."""
    with open(path, "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    os.chmod(path, 0o600)
    return path


def make_ca(directory, name="keel test peer CA"):
    """A self-signed CA (EC P-256) in directory/ca.crt, ca.key; returns
    (cert path, key path)."""
    os.makedirs(directory, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", "ca.key", "-out", "ca.crt", "-days", str(CERT_DAYS), "-subj", "/CN=%s" % name,
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=directory)
    return os.path.join(directory, "ca.crt"), os.path.join(directory, "ca.key")


def make_member_cert(directory, ca, member_id, name=None, extra_san=None):
    """A certificate for member `member_id` signed by `ca` (from make_ca):
    DNS SAN `name` (default keel-member-<id>) plus `extra_san` if given
    (e.g. "IP:127.0.0.1", so that clients of a TLS client port reached by
    address verify it too), usable as TLS server and client. Returns (cert
    path, key path) in `directory`."""
    name = name or "keel-member-%d" % member_id
    ca_cert, ca_key = ca
    base = "member%d-%s" % (member_id, os.path.basename(os.path.dirname(ca_cert)) or "ca")
    ext = os.path.join(directory, base + ".ext")
    with open(ext, "w") as f:
        f.write("subjectAltName=DNS:%s%s\n" % (name, "," + extra_san if extra_san else ""))
        f.write("extendedKeyUsage=serverAuth,clientAuth\n")
        f.write("keyUsage=critical,digitalSignature\n")
        f.write("basicConstraints=CA:FALSE\n")
    _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", base + ".key", "-out", base + ".csr", "-subj", "/CN=%s" % name, cwd=directory)
    _openssl("x509", "-req", "-in", base + ".csr", "-CA", ca_cert, "-CAkey", ca_key, "-CAcreateserial",
             "-out", base + ".crt", "-days", str(CERT_DAYS), "-extfile", ext, cwd=directory)
    return os.path.join(directory, base + ".crt"), os.path.join(directory, base + ".key")


def make_peer_pki(directory, member_ids, extra_san=None):
    """A CA and a certificate per member: {"ca": (cert, key), id: (cert, key), ...}."""
    ca = make_ca(directory)
    pki = {"ca": ca}
    for member_id in member_ids:
        pki[member_id] = make_member_cert(directory, ca, member_id, extra_san=extra_san)
    return pki


def peer_auth_settings(directory, size, tls=False, secret=False, extra_san=None):
    """(settings, node_settings) for KeelCluster(size, settings=...,
    node_settings=...): every member shares the secret and the CA, each has
    its own certificate (members 1..size)."""
    os.makedirs(directory, exist_ok=True)
    settings = {}
    per_member = {i: {} for i in range(1, size + 1)}
    if secret:
        settings["peer_secret_file"] = make_peer_secret(os.path.join(directory, "peer.secret"))
    if tls:
        pki = make_peer_pki(directory, range(1, size + 1), extra_san=extra_san)
        settings["peer_tls"] = True
        settings["tls_ca_file"] = pki["ca"][0]
        for i in per_member:
            per_member[i] = {"tls_cert_file": pki[i][0], "tls_key_file": pki[i][1]}
    return settings, lambda member_id: per_member[member_id]
