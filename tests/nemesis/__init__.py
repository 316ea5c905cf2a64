"""Jepsen-style fault campaign on real keel processes (`make nemesis`, tests/nemesis/run.py)."""
