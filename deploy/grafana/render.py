#!/usr/bin/env python3
"""Draw deploy/grafana/dashboards/stocksvc.json from a Prometheus, without Grafana.

A stand-in for a Grafana screenshot where no Grafana runs (issue #34: the machine that made
docs/img/dashboard-sale.png can pull no image, and its stand-in images run no Grafana). It runs
every panel's own queries, as the dashboard has them, against Prometheus's query_range API
($__rate_interval as 4 scrape intervals, as Grafana reckons it; the variables at All) and lays
the panels out on the dashboard's grid, as a static HTML page to screenshot with Chromium:

    python3 deploy/grafana/render.py -prometheus http://127.0.0.1:9091 -minutes 6 -out /tmp/dash.html
    chromium --headless --no-sandbox --disable-gpu --disable-background-networking \\
      --screenshot=docs/img/dashboard-sale.png --window-size=1600,2400 file:///tmp/dash.html

It draws time series as lines and stats as their last values; axes, units and legends are
plain. It is a picture of what the queries return, not of Grafana's look.
"""
import argparse
import html
import json
import math
import pathlib
import re
import time
import urllib.parse
import urllib.request

PALETTE = ["#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c", "#5794f2", "#b877d9", "#fade2a", "#96d98d", "#ffa6b0", "#ca95e5", "#c8f2c2"]
WIDTH, ROW = 1584, 30  # the page's width; pixels per unit of gridPos height


def query_range(prom, expr, start, end, step):
    q = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{prom}/api/v1/query_range?{q}", timeout=30) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise RuntimeError(f"{expr}: {body}")
    return body["data"]["result"]


def legend(fmt, labels):
    if not fmt:
        return ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "__name__") or "value"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt)


def fmt_value(v, unit):
    if v is None or math.isnan(v):
        return "–"
    if unit == "percentunit":
        return f"{v * 100:.0f}%"
    if unit == "s":
        if abs(v) < 1:
            return f"{v * 1000:.3g} ms"
        return f"{v:.3g} s"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.3g}"


def chart(series, start, end, w, h, unit):
    """An SVG of series [(name, color, [(t, v)])] over [start, end]."""
    pts = [v for _, _, vals in series for _, v in vals if not math.isnan(v) and not math.isinf(v)]
    if not pts:
        return f'<svg width="{w}" height="{h}"><text x="{w / 2}" y="{h / 2}" fill="#777" text-anchor="middle">No data</text></svg>'
    lo, hi = min(0.0, min(pts)), max(pts)
    if hi == lo:
        hi = lo + 1
    left, bottom = 64, 18
    pw, ph = w - left - 8, h - bottom - 6
    x = lambda t: left + (t - start) / (end - start) * pw
    y = lambda v: 6 + ph - (v - lo) / (hi - lo) * ph
    out = [f'<svg width="{w}" height="{h}">']
    for i in range(5):
        v = lo + (hi - lo) * i / 4
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#2c3235"/>'
                   f'<text x="{left - 6}" y="{y(v) + 4:.1f}" fill="#9fa7b3" font-size="11" text-anchor="end">{html.escape(fmt_value(v, unit))}</text>')
    for i in range(5):
        t = start + (end - start) * i / 4
        out.append(f'<text x="{x(t):.1f}" y="{h - 3}" fill="#9fa7b3" font-size="11" text-anchor="middle">{time.strftime("%H:%M:%S", time.gmtime(t))}</text>')
    for _, color, vals in series:
        segs, cur = [], []
        for t, v in vals:
            if math.isnan(v) or math.isinf(v):
                if cur:
                    segs.append(cur)
                cur = []
                continue
            cur.append(f"{x(t):.1f},{y(v):.1f}")
        if cur:
            segs.append(cur)
        for s in segs:
            out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.6" points="{" ".join(s)}"/>')
    out.append("</svg>")
    return "".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-prometheus", default="http://127.0.0.1:9091")
    ap.add_argument("-dashboard", default=str(pathlib.Path(__file__).parent / "dashboards" / "stocksvc.json"))
    ap.add_argument("-minutes", type=float, default=6)
    ap.add_argument("-scrape", type=float, default=10, help="Prometheus's scrape interval, seconds")
    ap.add_argument("-out", required=True)
    a = ap.parse_args()
    dash = json.load(open(a.dashboard))
    end = time.time()
    start = end - a.minutes * 60
    step = max(a.scrape, (end - start) / 300)
    rate_interval = f"{int(max(4 * a.scrape, step))}s"

    def flat(panels):
        for p in panels:
            yield p
            yield from flat(p.get("panels", []))

    body = []
    height = 0
    for p in flat(dash["panels"]):
        g = p["gridPos"]
        px, py = g["x"] * WIDTH / 24, g["y"] * ROW
        pw, ph = g["w"] * WIDTH / 24, g["h"] * ROW
        height = max(height, py + ph)
        style = f"left:{px:.0f}px;top:{py:.0f}px;width:{pw - 6:.0f}px;height:{ph - 6:.0f}px"
        if p["type"] == "row":
            body.append(f'<div class="row" style="{style}">{html.escape(p["title"])}</div>')
            continue
        unit = p.get("fieldConfig", {}).get("defaults", {}).get("unit")
        series = []
        for tg in p.get("targets", []):
            expr = tg["expr"].replace("$__rate_interval", rate_interval).replace("$replica", ".*").replace("$product", ".*")
            for r in query_range(a.prometheus, expr, start, end, step):
                vals = [(float(t), float(v)) for t, v in r["values"]]
                name = legend(tg.get("legendFormat"), r["metric"])
                series.append((name, PALETTE[len(series) % len(PALETTE)], vals))
        if p["type"] == "stat":
            inner = "".join(f'<div class="stat"><span style="color:{c}">{html.escape(fmt_value(v[-1][1] if v else None, unit))}</span>'
                            f'<small>{html.escape(n)}</small></div>' for n, c, v in series) or '<div class="nodata">No data</div>'
        else:
            inner = chart(series, start, end, int(pw - 16), int(ph - 6 - 30 - 18 * min(3, math.ceil(len(series) / 4))), unit)
            inner += '<div class="legend">' + "".join(
                f'<span><i style="background:{c}"></i>{html.escape(n)}</span>' for n, c, _ in series) + "</div>"
        body.append(f'<div class="panel" style="{style}"><h3>{html.escape(p["title"])}</h3>{inner}</div>')

    page = f"""<!doctype html><meta charset="utf-8"><title>{html.escape(dash['title'])}</title>
<style>
body{{margin:0;overflow:hidden;background:#111217;color:#ccccdc;font:13px Inter,Helvetica,Arial,sans-serif}}
header{{padding:10px 14px;font-size:16px;border-bottom:1px solid #2c3235}}
header small{{color:#8e8e8e;margin-left:12px;font-size:12px}}
main{{position:relative;height:{height + 10}px;margin:8px}}
.panel,.row{{position:absolute;box-sizing:border-box}}
.panel{{background:#181b1f;border:1px solid #2c3235;border-radius:2px;padding:4px 8px;overflow:hidden}}
.row{{font-size:15px;font-weight:500;padding-top:6px}}
h3{{margin:2px 0 4px;font-size:13px;font-weight:500}}
.legend{{font-size:11px;line-height:18px;max-height:54px;overflow:hidden}}
.legend span{{margin-right:12px;white-space:nowrap}}
.legend i{{display:inline-block;width:12px;height:3px;margin-right:4px;vertical-align:middle}}
.stat{{display:inline-block;margin:10px 18px}} .stat span{{font-size:30px;display:block}} .stat small{{color:#9fa7b3}}
.nodata{{color:#777;margin:20px}}
</style>
<header>{html.escape(dash['title'])}<small>{time.strftime('%Y-%m-%d %H:%M', time.gmtime(start))}–{time.strftime('%H:%M UTC', time.gmtime(end))} · replica All · product All · drawn by deploy/grafana/render.py from the dashboard's queries (not Grafana)</small></header>
<main>{''.join(body)}</main>"""
    pathlib.Path(a.out).write_text(page)


if __name__ == "__main__":
    main()
