"""The run's timeline as an SVG written by hand (Python standard library
only): completed operations per second (ok, failed with an error, unknown)
as lines, and every fault as a shaded band with its kind."""

from collections import Counter

WIDTH, HEIGHT = 1000, 420
LEFT, RIGHT, TOP, BOTTOM = 60, 20, 30, 120
COLORS = {"ok": "#2b7bba", "failed": "#e39c37", "unknown": "#c8372d"}
FAULT_COLORS = {"kill": "#f4cccc", "pause": "#fff2cc", "partition": "#d9ead3", "bridge": "#d0e0e3",
                "isolate-leader": "#d9d2e9", "restart-cluster": "#ead1dc"}


def outcome(op):
    ret = op.get("ret")
    if ret is None:
        return "unknown"
    return "failed" if ret.get("type") == "error" else "ok"


def per_second(ops, seconds):
    counts = {k: Counter() for k in COLORS}
    for op in ops:
        t = op.get("complete", op["invoke"]) // 1_000_000
        if t < seconds:
            counts[outcome(op)][t] += 1
    return counts


def render(ops, faults, seconds, title):
    """SVG text. `faults`: dicts with kind, start, end (s)."""
    seconds = max(1, int(seconds) + 1)
    counts = per_second(ops, seconds)
    peak = max([1] + [c[t] for c in counts.values() for t in range(seconds)])
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(t):
        return LEFT + plot_w * t / seconds

    def y(v):
        return TOP + plot_h * (1 - v / peak)

    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
           'font-size="11">' % (WIDTH, HEIGHT),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="18" font-size="13">%s</text>' % (LEFT, _escape(title))]
    for i, f in enumerate(faults):
        x0, x1 = x(f["start"]), x(f["end"] if f["end"] is not None else seconds)
        out.append('<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"><title>%s</title></rect>'
                   % (x0, TOP, max(x1 - x0, 1), plot_h, FAULT_COLORS.get(f["kind"], "#eeeeee"),
                      _escape("%s %s %.1f-%.1f s" % (f["kind"], f.get("detail", ""), f["start"], f["end"] or 0))))
        out.append('<text x="%.1f" y="%d" font-size="9" transform="rotate(60 %.1f %d)">%s</text>'
                   % (x0, TOP + plot_h + 14, x0, TOP + plot_h + 14, _escape(f["kind"])))
    out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (LEFT, TOP + plot_h, LEFT + plot_w,
                                                                           TOP + plot_h))
    out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (LEFT, TOP, LEFT, TOP + plot_h))
    for frac in (0, 0.5, 1):
        out.append('<text x="%d" y="%.1f" text-anchor="end">%d</text>' % (LEFT - 4, y(peak * frac) + 4,
                                                                           peak * frac))
    step = max(1, seconds // 10)
    for t in range(0, seconds, step):
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%d s</text>' % (x(t), TOP + plot_h + 50, t))
    for kind, color in COLORS.items():
        points = " ".join("%.1f,%.1f" % (x(t + 0.5), y(counts[kind][t])) for t in range(seconds))
        out.append('<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>' % (color, points))
    lx = LEFT
    for kind, color in COLORS.items():
        out.append('<rect x="%d" y="%d" width="12" height="4" fill="%s"/>' % (lx, HEIGHT - 30, color))
        out.append('<text x="%d" y="%d">%s ops/s</text>' % (lx + 16, HEIGHT - 25, kind))
        lx += 110
    for kind, color in FAULT_COLORS.items():
        out.append('<rect x="%d" y="%d" width="12" height="10" fill="%s"/>' % (lx, HEIGHT - 33, color))
        out.append('<text x="%d" y="%d">%s</text>' % (lx + 16, HEIGHT - 25, kind))
        lx += 90
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _escape(text):
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
