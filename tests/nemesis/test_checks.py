"""The nemesis checks can fail: hand-made histories with a planted fault
(an acknowledged write missing from the final state, a stale local read,
zxids going back in a session, an ephemeral outliving its session, a
non-linearizable history for keel-linearize). No server needed (the
keel-linearize cases need its binary)."""

import os

import pytest

from nemesis import checks
from nemesis.run import LINEARIZE_BIN


def op(process, session, invoke, call, ret=None, complete=None, zxid=None, stat=None, local=False):
    o = {"process": process, "session": session, "invoke": invoke, "call": call, "ret": ret}
    if ret is not None:
        o["complete"] = complete if complete is not None else invoke + 1
    if zxid is not None:
        o["zxid"] = zxid
    if stat is not None:
        o["stat"] = stat
    if local:
        o["local"] = True
    return o


def create(path, data, ephemeral=False):
    c = {"op": "create", "path": path, "data": data}
    if ephemeral:
        c["ephemeral"] = True
    return c


def set_data(path, data, version=-1):
    return {"op": "setData", "path": path, "data": data, "version": version}


def get(path):
    return {"op": "getData", "path": path}


def node(data, czxid, mzxid, version=0, owner=0):
    return {"data": data, "czxid": czxid, "mzxid": mzxid, "version": version, "ephemeralOwner": owner}


HISTORY = [
    op(1, 7, 10, create("/e0-g0", "p1-1"), {"type": "created", "path": "/e0-g0"}, zxid=0x100),
    op(1, 7, 20, set_data("/e0-g0", "p1-2"), {"type": "set", "version": 1}, zxid=0x101),
    op(2, 8, 30, set_data("/e0-g0", "p2-1"), None),  # unknown outcome
    op(2, 8, 40, create("/e0-g1", "p2-2"), {"type": "created", "path": "/e0-g1"}, zxid=0x103),
]


# ---------------------------------------------------------------- acknowledged writes
def test_final_state_with_every_acknowledged_write_passes():
    final = {"/e0-g0": node("p1-2", 0x100, 0x101, 1), "/e0-g1": node("p2-2", 0x103, 0x103)}
    assert checks.lost_writes(HISTORY, final) == []


def test_an_unacknowledged_write_may_replace_the_last_acknowledged_one():
    final = {"/e0-g0": node("p2-1", 0x100, 0x104, 2), "/e0-g1": node("p2-2", 0x103, 0x103)}
    assert checks.lost_writes(HISTORY, final) == []


def test_planted_lost_write_is_caught():
    # The setData acknowledged at 0x101 is missing: the node is back at its create.
    final = {"/e0-g0": node("p1-1", 0x100, 0x100, 0), "/e0-g1": node("p2-2", 0x103, 0x103)}
    found = checks.lost_writes(HISTORY, final)
    assert len(found) == 1 and "lost" in found[0] and "/e0-g0" in found[0], found


def test_planted_missing_node_and_phantom_value_are_caught():
    final = {"/e0-g0": node("p1-2", 0x100, 0x101, 1), "/e0-g1": None}
    assert any("no node" in v for v in checks.lost_writes(HISTORY, final))
    final = {"/e0-g0": node("nobody wrote this", 0x100, 0x105, 2), "/e0-g1": node("p2-2", 0x103, 0x103)}
    assert any("no unacknowledged write carried it" in v for v in checks.lost_writes(HISTORY, final))


def test_an_ephemeral_may_be_gone_with_its_session():
    history = [op(1, 7, 10, create("/e0-g2", "p1-9", ephemeral=True), {"type": "created", "path": "/e0-g2"},
                  zxid=0x200)]
    assert checks.lost_writes(history, {"/e0-g2": None}) == []


# ---------------------------------------------------------------- local reads
def test_consistent_local_reads_pass():
    history = HISTORY + [
        op(1, 7, 50, get("/e0-g0"), {"type": "data", "data": "p1-2", "version": 1}, zxid=0x103,
           stat={"mzxid": 0x101}, local=True),
    ]
    assert checks.local_reads(history) == []


def test_planted_stale_local_read_is_caught():
    # The member says it applied 0x103 but returns the value before the write at 0x101.
    history = HISTORY + [
        op(1, 9, 50, get("/e0-g0"), {"type": "data", "data": "p1-1", "version": 0}, zxid=0x103,
           stat={"mzxid": 0x100}, local=True),
    ]
    found = checks.local_reads(history)
    assert len(found) == 1 and "missing the acknowledged set" in found[0], found


def test_planted_zxid_going_back_in_a_session_is_caught():
    history = HISTORY + [
        op(1, 7, 50, get("/e0-g1"), {"type": "error", "code": -101}, zxid=0x100, local=True),
    ]
    found = checks.local_reads(history)
    assert len(found) == 1 and "after one at 0x101" in found[0], found


def test_planted_value_with_the_wrong_mzxid_is_caught():
    history = HISTORY + [
        op(3, 9, 50, get("/e0-g0"), {"type": "data", "data": "p2-2", "version": 1}, zxid=0x103,
           stat={"mzxid": 0x101}, local=True),
    ]
    assert any("which wrote 'p1-2'" in v for v in checks.local_reads(history))


# ---------------------------------------------------------------- ephemerals
def test_expiry_deadline_moves_past_overlapping_faults():
    assert checks.expiry_deadline(10.0, [], 4.0, slack_s=6.0) == 20.0
    # a fault from 12 to 30 s: counted from its end
    assert checks.expiry_deadline(10.0, [(12.0, 30.0)], 4.0, slack_s=6.0) == 40.0
    # a fault that ended before the abandonment changes nothing
    assert checks.expiry_deadline(10.0, [(1.0, 5.0)], 4.0, slack_s=6.0) == 20.0


def test_planted_ephemeral_outliving_its_session_is_caught():
    final = {"/e0-g0": node("x", 1, 1, owner=0x77), "/e0-g1": node("y", 2, 2)}
    found = checks.ephemerals(final, {}, [], [], [], 4.0)
    assert len(found) == 1 and "0x77" in found[0]
    late = {0x78: (10_000_000, 40_000_000)}  # still seen 30 s after abandonment, no fault
    found = checks.ephemerals({}, late, [], [], [], 4.0)
    assert len(found) == 1 and "30.0 s after" in found[0], found
    assert checks.ephemerals({}, late, [], [], [(11.0, 35.0)], 4.0) == []  # a fault held expiry back
    assert checks.ephemerals({}, {0x79: (10_000_000, 15_000_000)}, [], [], [], 4.0) == []


# ---------------------------------------------------------------- linearizability
needs_linearize = pytest.mark.skipif(not os.access(LINEARIZE_BIN, os.X_OK),
                                     reason="keel-linearize missing: cargo build --release -p keel-linearize")


@needs_linearize
def test_keel_linearize_passes_a_recorded_style_history(tmp_path):
    history = HISTORY + [
        op(3, 9, 50, get("/e0-g0"), {"type": "data", "data": "p1-2", "version": 1}, zxid=0x103,
           stat={"mzxid": 0x101}),
        op(3, 9, 60, get("/e0-g0"), {"type": "data", "data": "p1-1", "version": 0}, zxid=0x99,
           stat={"mzxid": 0x100}, local=True),  # stale, but local: not linearizability's business
    ]
    path = str(tmp_path / "h.jsonl")
    checks.write_history(history, path)
    found, out = checks.linearizability(path, LINEARIZE_BIN)
    assert found == [], out


@needs_linearize
def test_planted_stale_synced_read_fails_keel_linearize(tmp_path):
    history = HISTORY + [
        op(3, 9, 50, get("/e0-g0"), {"type": "data", "data": "p1-1", "version": 0}, zxid=0x103,
           stat={"mzxid": 0x100}),
    ]
    path = str(tmp_path / "h.jsonl")
    checks.write_history(history, path)
    found, out = checks.linearizability(path, LINEARIZE_BIN)
    assert found and "not linearizable" in found[0], out
    assert "NOT linearizable" in out


def test_timeline_is_well_formed_svg():
    import xml.etree.ElementTree as ET

    from nemesis import timeline
    ops = HISTORY + [op(1, 7, 2_500_000, get("/e0-g0"), None)]
    faults = [{"kind": "kill", "start": 0.5, "end": 1.5, "detail": "n1 (leader)"},
              {"kind": "partition", "start": 2.0, "end": None, "detail": "n1 | n2,n3"}]
    svg = timeline.render(ops, faults, 3.0, "a <title> & more")
    root = ET.fromstring(svg)
    assert root.tag.endswith("svg")
    assert sum(1 for e in root.iter() if e.tag.endswith("polyline")) == 3
    assert "kill" in svg and "&lt;title&gt;" in svg
