// The sale report's plots (loadtest/report/page.go): uPlot charts per run, on one time axis —
// outcomes per second, stock remaining, latency percentiles by outcome, and any panel the mode
// adds — with the fault windows shaded, the benchmark's loads outlined, and the sold-out moment
// and the fault's events drawn over them. Each legend reads the whole run's figure (a total,
// the value at the end, a percentile over the run) until a moment is picked, so that a static
// render, a screenshot or a print, says something where uPlot would say "–". A run's charts
// share the window's height left below its tables, so that the run, from its title to its last
// chart, fills the window — a tall screenshot included, whose lower half stayed blank when
// every chart was 240 px — within 200 to 700 px a chart. window.stocksvcReport lists the charts, for a reader's console and for the
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

  // fromZero is a linear scale's range from a little below zero: a series at zero is drawn
  // above the axis, not hidden under it.
  const fromZero = (u, min, max) => {
    const hi = Math.max(max || 0, 1);
    return [-0.04 * hi, 1.08 * hi];
  };

  // fit sizes a run's charts to the window: its height, less what stands above the charts
  // (for the first run the page's header too, since it is what the window opens on) and what
  // each chart has besides its plot (caption, axes' legend, key), measured rather than guessed.
  function fit(run, index) {
    const charts = report.charts.filter((c) => c.run === run.id);
    const section = document.getElementById(run.id);
    const column = section && section.querySelector('.charts');
    const figure = column && column.querySelector('figure');
    if (!charts.length || !figure) return;
    const width = Math.max(320, column.clientWidth);
    const top = figure.getBoundingClientRect().top - (index === 0 ? -window.scrollY : section.getBoundingClientRect().top);
    const plots = charts.reduce((sum, c) => sum + c.plot.height, 0);
    const besides = column.getBoundingClientRect().bottom - figure.getBoundingClientRect().top - plots;
    const height = Math.round(Math.min(700, Math.max(200, (window.innerHeight - top - besides - 24) / charts.length)));
    for (const c of charts) {
      if (c.plot.width !== width || c.plot.height !== height) c.plot.setSize({ width, height });
    }
  }

  function chart(run, kind, xs, series, yLabel, extra) {
    const el = document.getElementById(`${run.id}-${kind}`);
    if (!el) return;
    const end = xMax(run);
    const unit = (extra && extra.unit) || '';
    const opts = {
      width: Math.max(320, el.clientWidth),
      height: 240, // until fit sizes it
      cursor: { sync: { key: run.id } },
      scales: { x: { time: false, range: () => [0, end] }, y: (extra && extra.y) || { range: fromZero } },
      axes: [
        { label: 'seconds since the load began' },
        { label: yLabel, size: 64 },
      ],
      series: [{ label: 't', value: (u, v, i, idx) => (idx == null ? run.span : v == null ? '–' : `${v.toFixed(2)} s`) }].concat(series.map((s) => ({
        label: s.name,
        stroke: s.color,
        dash: s.dash ? [6, 4] : undefined,
        fill: (extra && extra.fill) ? `${s.color}1f` : undefined,
        width: s.dash ? 1.5 : 2,
        spanGaps: !!(extra && extra.spanGaps),
        paths: extra && extra.paths,
        points: extra && extra.points,
        value: (u, v, i, idx) => (idx == null ? s.legend : v == null ? '–' : `${v.toFixed(v < 10 ? 2 : 0)}${unit}`),
      }))),
      plugins: [overlay(run)],
    };
    const plot = new uPlot(opts, [xs].concat(series.map((s) => s.values)), el);
    plot.setLegend({ idx: null });
    report.charts.push({ run: run.id, kind, plot });
  }

  const runs = window.STOCKSVC_RUNS || [];
  for (const run of runs) {
    try {
      const panels = run.panels || [];
      chart(run, 'outcomes', run.t, run.outcomes, 'answers / s', { fill: true, unit: '/s' });
      if (run.stock.length) {
        chart(run, 'stock', run.stockT, run.stock, 'units', { paths: uPlot.paths.stepped({ align: 1 }), spanGaps: true });
      }
      if (run.latency.length) {
        // Dots as well as lines: an outcome answered in a few buckets only (a busy answer, a
        // failure) has no neighbour to draw a line to, and would not show at all.
        chart(run, 'latency', run.t, run.latency, 'ms (log scale)', { y: { distr: 3 }, unit: ' ms', points: { show: true, size: 4 } });
      } else {
        const el = document.getElementById(`${run.id}-latency`);
        if (el) el.textContent = 'No latency measured in this run.';
      }
      panels.forEach((p, i) => chart(run, `panel${i}`, p.t, p.series, p.unit, { paths: uPlot.paths.stepped({ align: 1 }), spanGaps: true }));
    } catch (e) {
      report.errors.push(`${run.id}: ${e}`);
      throw e;
    }
  }

  // uPlot lays a new chart out in a microtask (its legend, its canvas): measure after that.
  // This runs before the page's load event, as the browser test expects.
  Promise.resolve().then(() => {
    runs.forEach(fit);
    window.addEventListener('resize', () => runs.forEach(fit));
    document.body.dataset.charts = String(report.charts.length);
  });
})();
