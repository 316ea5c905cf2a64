"""Building the Go programs of the tests and benchmarks (Go's ZooKeeper
client, github.com/go-zookeeper/zk): `make test-deps` downloads their
modules (scripts/install-test-deps.sh), and a test or a benchmark builds one
with `build_go`. Python 3 standard library only (bench/ uses it too)."""

import os
import shutil
import subprocess

# Where the machine's Go SDK may live when `go` is not on PATH.
GO_CANDIDATES = ("/usr/local/go/bin/go", "/usr/lib/go/bin/go")
# One `go build` of a small module (download included when the cache is cold).
GO_BUILD_TIMEOUT_S = 600


def go_command():
    """The `go` binary: PATH first, then the usual SDK places; None if absent."""
    found = shutil.which("go")
    if found:
        return found
    for candidate in GO_CANDIDATES:
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def go_environment():
    """The environment for `go`: never a toolchain download (the local Go
    builds these modules), modules only as go.sum pins them."""
    env = dict(os.environ)
    env["GOTOOLCHAIN"] = "local"
    env["GOFLAGS"] = "-mod=readonly"
    env.setdefault("CGO_ENABLED", "0")
    return env


def build_go(module_dir, package, out_path):
    """`go build -o out_path ./package` inside module_dir; returns out_path.
    Raises RuntimeError with go's output when Go is missing or the build fails."""
    go = go_command()
    if go is None:
        raise RuntimeError("no `go` command (make test-deps installs Debian's golang-go when the machine has no Go)")
    p = subprocess.run([go, "build", "-trimpath", "-o", out_path, "./" + package], cwd=module_dir,
                       env=go_environment(), capture_output=True, text=True, timeout=GO_BUILD_TIMEOUT_S)
    if p.returncode != 0:
        raise RuntimeError("go build ./%s in %s failed (%d):\n%s%s"
                           % (package, module_dir, p.returncode, p.stdout[-2000:], p.stderr[-3000:]))
    return out_path
