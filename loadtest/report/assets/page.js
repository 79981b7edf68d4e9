// The sale report's plots (loadtest/report/page.go): three uPlot charts per run, on one time
// axis — outcomes per second, stock remaining, latency percentiles — with the fault windows
// shaded, the benchmark's loads outlined, and the sold-out moment and the fault's events drawn
// over them. window.stocksvcReport lists the charts, for a reader's console and for the
// browser test (report/browser_test.go), which checks that they hold the run's data.
(function () {
  'use strict';
  const report = { charts: [], errors: [] };
  window.stocksvcReport = report;
  window.addEventListener('error', (e) => report.errors.push(String(e.message)));

  const px = (n) => Math.round(n * uPlot.pxRatio);

  // overlay marks a run's moments and windows on a chart: behind the series (drawAxes) the
  // fault windows and the loads, over them (draw) the sold-out moment and the events.
  function overlay(run) {
    const band = (u, w, fill, label) => {
      const x0 = u.valToPos(w.start, 'x', true);
      const x1 = u.valToPos(w.end, 'x', true);
      const { top, height } = u.bbox;
      u.ctx.fillStyle = fill;
      u.ctx.fillRect(x0, top, Math.max(px(2), x1 - x0), height);
      if (label) {
        u.ctx.fillStyle = '#555';
        u.ctx.font = `${px(11)}px sans-serif`;
        u.ctx.textBaseline = 'top';
        u.ctx.textAlign = 'left';
        u.ctx.fillText(label, x0 + px(3), top + px(2), Math.max(px(20), x1 - x0 - px(4)));
      }
    };
    const vline = (u, at, color, dash, width, label) => {
      const x = u.valToPos(at, 'x', true);
      const { top, height } = u.bbox;
      u.ctx.save();
      u.ctx.strokeStyle = color;
      u.ctx.lineWidth = px(width);
      u.ctx.setLineDash(dash.map(px));
      u.ctx.beginPath();
      u.ctx.moveTo(x, top);
      u.ctx.lineTo(x, top + height);
      u.ctx.stroke();
      u.ctx.restore();
      if (label) {
        u.ctx.fillStyle = color;
        u.ctx.font = `bold ${px(11)}px sans-serif`;
        u.ctx.textBaseline = 'top';
        u.ctx.textAlign = 'left';
        u.ctx.fillText(label, x + px(3), top + px(14));
      }
    };
    return {
      hooks: {
        drawAxes: [(u) => {
          u.ctx.save();
          (run.phases || []).forEach((w, i) => band(u, w, i % 2 ? 'rgba(47,111,214,0.05)' : 'rgba(47,111,214,0.11)', w.label));
          (run.faults || []).forEach((w) => band(u, w, 'rgba(214,47,47,0.15)', w.label));
          u.ctx.restore();
        }],
        draw: [(u) => {
          (run.events || []).forEach((e) => vline(u, e.at, 'rgba(120,40,40,0.55)', [2, 3], 1, ''));
          if (run.soldOut != null) vline(u, run.soldOut, '#111', [6, 4], 2, 'sold out');
        }],
      },
    };
  }

  // xMax is where every chart of a run ends, so that they line up.
  function xMax(run) {
    let m = run.t.length ? run.t[run.t.length - 1] + run.step : 1;
    if (run.stockT.length) m = Math.max(m, run.stockT[run.stockT.length - 1]);
    (run.faults || []).concat(run.phases || []).forEach((w) => { m = Math.max(m, w.end); });
    return m;
  }

  function chart(run, kind, xs, series, yLabel, extra) {
    const el = document.getElementById(`${run.id}-${kind}`);
    if (!el) return;
    const end = xMax(run);
    const opts = {
      width: Math.max(320, el.clientWidth),
      height: 240,
      cursor: { sync: { key: run.id } },
      scales: { x: { time: false, range: () => [0, end] }, y: (extra && extra.y) || {} },
      axes: [
        { label: 'seconds since the load began' },
        { label: yLabel, size: 64 },
      ],
      series: [{ label: 't', value: (u, v) => (v == null ? '–' : `${v.toFixed(2)} s`) }].concat(series.map((s) => ({
        label: s.name,
        stroke: s.color,
        fill: (extra && extra.fill) ? `${s.color}1f` : undefined,
        width: 1.5,
        spanGaps: !!(extra && extra.spanGaps),
        paths: extra && extra.paths,
        value: (u, v) => (v == null ? '–' : `${v.toFixed(v < 10 ? 2 : 0)}${(extra && extra.unit) || ''}`),
      }))),
      plugins: [overlay(run)],
    };
    const plot = new uPlot(opts, [xs].concat(series.map((s) => s.values)), el);
    report.charts.push({ run: run.id, kind, plot });
  }

  for (const run of window.STOCKSVC_RUNS || []) {
    try {
      chart(run, 'outcomes', run.t, run.outcomes, 'answers / s', { fill: true, unit: '/s' });
      if (run.stock.length) {
        chart(run, 'stock', run.stockT, run.stock, 'units', { paths: uPlot.paths.stepped({ align: 1 }), spanGaps: true });
      }
      if (run.latency.length) {
        chart(run, 'latency', run.t, run.latency, 'ms (log scale)', { y: { distr: 3 }, unit: ' ms' });
      } else {
        const el = document.getElementById(`${run.id}-latency`);
        if (el) el.textContent = 'No latency measured in this run.';
      }
    } catch (e) {
      report.errors.push(`${run.id}: ${e}`);
      throw e;
    }
  }

  window.addEventListener('resize', () => {
    for (const c of report.charts) {
      const w = Math.max(320, c.plot.root.parentElement.clientWidth);
      if (w !== c.plot.width) c.plot.setSize({ width: w, height: c.plot.height });
    }
  });
  document.body.dataset.charts = String(report.charts.length);
})();
