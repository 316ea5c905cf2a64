"""A real Prometheus server (Debian's `prometheus` package, /usr/bin/prometheus)
scraping given targets, and its HTTP query API.

    prom = PrometheusServer(["127.0.0.1:7000", ...], workdir)
    prom.start()                       # waits for /-/ready
    prom.query('up')                   # /api/v1/query: [(labels, value), ...]
    prom.wait_for('up', lambda r: ..)  # until the predicate holds
    prom.stop()                        # SIGTERM, SIGKILL after 10 s

It listens on 127.0.0.1 on a free port, keeps its TSDB in `workdir`, runs in
its own process group and is killed by the same atexit hook as the servers.
Python 3 standard library only.
"""

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.parse
import urllib.request

from .servers import _live, _live_lock, free_port

PROMETHEUS_BIN = os.environ.get("PROMETHEUS_BIN", shutil.which("prometheus") or "/usr/bin/prometheus")


def prometheus_available():
    return os.path.isfile(PROMETHEUS_BIN) and os.access(PROMETHEUS_BIN, os.X_OK)


class PrometheusServer:
    def __init__(self, targets, workdir, scrape_interval="1s", job="keel"):
        self.targets = list(targets)
        self.workdir = workdir
        os.makedirs(workdir, exist_ok=True)
        self.scrape_interval = scrape_interval
        self.job = job
        self.port = free_port()
        self.config_path = os.path.join(workdir, "prometheus.yml")
        self.log_path = os.path.join(workdir, "prometheus.log")
        self.proc = None
        self._log = None

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def _write_config(self):
        targets = ", ".join('"%s"' % t for t in self.targets)
        with open(self.config_path, "w") as f:
            f.write("global:\n"
                    "  scrape_interval: %s\n"
                    "  scrape_timeout: %s\n"
                    "scrape_configs:\n"
                    "  - job_name: %s\n"
                    "    static_configs:\n"
                    "      - targets: [%s]\n" % (self.scrape_interval, self.scrape_interval, self.job, targets))

    def start(self, timeout=60.0):
        self._write_config()
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [PROMETHEUS_BIN, "--config.file=%s" % self.config_path,
             "--storage.tsdb.path=%s" % os.path.join(self.workdir, "tsdb"),
             "--web.listen-address=127.0.0.1:%d" % self.port,
             "--log.level=info"],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            cwd=self.workdir, start_new_session=True)
        with _live_lock:
            _live.add(self)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("prometheus exited with %s\n%s" % (self.proc.returncode, self.log_tail()))
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=2.0) as response:
                    if response.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.2)
        self.kill()
        raise RuntimeError("prometheus not ready within %.0fs\n%s" % (timeout, self.log_tail()))

    def api(self, path, **params):
        """GET /api/v1/<path>?params: the response's `data` (AssertionError
        if its status is not success)."""
        url = "%s/api/v1/%s?%s" % (self.url, path, urllib.parse.urlencode(params))
        with urllib.request.urlopen(url, timeout=10.0) as response:
            body = json.loads(response.read().decode())
        assert body.get("status") == "success", body
        return body["data"]

    def query(self, expr):
        """An instant query: [(labels dict, float value), ...]."""
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", data
        return [(r["metric"], float(r["value"][1])) for r in data["result"]]

    def targets_health(self):
        """{scrape url: (health, lastError)} of the active targets."""
        data = self.api("targets")
        return {t["scrapeUrl"]: (t["health"], t.get("lastError", "")) for t in data["activeTargets"]}

    def wait_for(self, expr, predicate, timeout=30.0):
        """Query `expr` until predicate(result) is true; returns the result,
        AssertionError with the last result (and the targets) after `timeout`."""
        deadline = time.monotonic() + timeout
        result = None
        while True:
            try:
                result = self.query(expr)
                if predicate(result):
                    return result
            except OSError:
                pass
            if time.monotonic() >= deadline:
                break
            time.sleep(0.25)
        raise AssertionError("prometheus: %s never satisfied the condition within %.0fs: %r; targets %r"
                             % (expr, timeout, result, self.targets_health()))

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def _signal(self, sig):
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def stop(self, timeout=10.0):
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.proc.wait(10)
        self._closed()
        return self.proc.returncode

    def kill(self):
        if self.proc is None:
            return None
        self._signal(signal.SIGKILL)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        self._closed()
        return self.proc.returncode

    def _closed(self):
        with _live_lock:
            _live.discard(self)
        if self._log:
            self._log.close()
            self._log = None

    def log_tail(self, n=60):
        try:
            with open(self.log_path, "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return ""
        return "----- prometheus log (%s) -----\n%s\n----- end -----" % (self.log_path, "\n".join(lines[-n:]))
