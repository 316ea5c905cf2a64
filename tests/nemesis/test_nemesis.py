"""The fault campaign as a test (`make nemesis` runs the same code
directly): NEMESIS_SECONDS (default 60 here, 180 in `make nemesis`) of faults on a NEMESIS_NODES
(default 3) node cluster, then every check; no violation allowed. A short
run with a planted lost write must report violations."""

import os
import shutil

import pytest

from conftest import report_summary, require_keel
from nemesis.run import LINEARIZE_BIN, run

SECONDS = float(os.environ.get("NEMESIS_SECONDS", "60"))
NODES = int(os.environ.get("NEMESIS_NODES", "3"))
SEED = os.environ.get("NEMESIS_SEED")
PLANTED_SECONDS = 15.0


def require_binaries():
    require_keel()
    if not os.access(LINEARIZE_BIN, os.X_OK):
        pytest.skip("%s is missing: cargo build --release -p keel-linearize" % LINEARIZE_BIN)


@pytest.mark.timeout(SECONDS + 900)
def test_nemesis_finds_no_violation():
    require_binaries()
    lines = []

    def out(*a, **_kw):
        text = " ".join(str(x) for x in a)
        lines.append(text)
        print(text, flush=True)

    violations, r = run(SECONDS, NODES, int(SEED) if SEED else None, out=out)
    report_summary(lines[-1])
    assert violations == 0, "\n".join(lines[-60:])
    shutil.rmtree(r.workdir, ignore_errors=True)


@pytest.mark.timeout(PLANTED_SECONDS + 600)
def test_a_planted_lost_write_is_reported():
    require_binaries()
    lines = []
    violations, r = run(PLANTED_SECONDS, 3, 7, plant="lost-write", out=lambda *a, **kw: lines.append(" ".join(
        str(x) for x in a)))
    text = "\n".join(lines)
    assert violations > 0, text
    assert "check acknowledged writes: 1 VIOLATIONS" in text, text
    assert "check linearizability:     1 VIOLATIONS" in text, text
    assert "planted: the final read of" in text, text
    shutil.rmtree(r.workdir, ignore_errors=True)
