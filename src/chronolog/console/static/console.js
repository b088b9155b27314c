// chronolog console: the timeline chart, drawn by the vendored uPlot from the series the server put in the
// page (<script type="application/json" id="timeline-data">). A click on a bar zooms into its bucket; a drag
// across the chart opens the records of the dragged window. Shipped in the package, nothing fetched.
(function () {
  var holder = document.getElementById("timeline");
  var source = document.getElementById("timeline-data");
  if (!holder || !source || typeof uPlot === "undefined") return;
  var d = JSON.parse(source.textContent);
  var n = d.totals.length;
  if (!n) return;
  var starts = d.edges.slice(0, n);
  var bars = uPlot.paths.bars({ size: [1, Infinity], gap: 1, align: 1 });

  function label(ms) { return new Date(ms).toISOString().replace("T", " ").replace(".000Z", "Z"); }
  // axis ticks in UTC, as every time the console prints: the date for steps of a day or more, else the clock
  // (with seconds below a minute); a tick at midnight of a finer axis shows its date too
  function tick(ms, incr) {
    var iso = new Date(ms).toISOString(); // 2005-06-14T15:16:01.000Z
    if (incr >= 86400000) return iso.slice(0, 10);
    var clock = incr >= 60000 ? iso.slice(11, 16) : iso.slice(11, 19);
    return iso.slice(11, 19) === "00:00:00" ? iso.slice(5, 10) + " " + clock : clock;
  }

  var opts = {
    width: Math.max(holder.clientWidth || 0, 600),
    height: 260,
    ms: 1, // x values are epoch milliseconds, as every time in chronolog
    tzDate: function (ts) { return uPlot.tzDate(new Date(ts), "Etc/UTC"); }, // ticks fall on UTC boundaries
    scales: { x: { time: true, range: function () { return [d.edges[0], d.edges[n]]; } },
              y: { range: function (u, lo, hi) { return [0, Math.max(hi, 1)]; } } },
    cursor: { drag: { x: true, y: false, setScale: false }, points: { show: false } },
    legend: { show: true },
    series: [
      { label: "bucket start (UTC)", value: function (u, v) { return v == null ? "-" : label(v); } },
      { label: "records", fill: "#4a7bd0", stroke: "#4a7bd0", width: 0, paths: bars, points: { show: false } },
    ],
    axes: [{ space: 110, values: function (u, splits, ax, space, incr) {
      return splits.map(function (v) { return tick(v, incr); }); } }, { size: 60 }],
    hooks: {
      setSelect: [function (u) {
        if (u.select.width < 4) return;
        var a = Math.round(u.posToVal(u.select.left, "x"));
        var b = Math.round(u.posToVal(u.select.left + u.select.width, "x"));
        a = Math.max(a, d.edges[0]);
        b = Math.min(b, d.edges[n]);
        if (b > a) location.href = d.records + "?from=" + a + "&to=" + b;
      }],
    },
  };
  var data = [starts, d.totals];
  if (d.late) { // from a data dir only: over a broker late records cannot be told, so there is no such series
    opts.series.push({ label: "late records", fill: "#e8892b", stroke: "#e8892b", width: 0, paths: bars,
                       points: { show: false } });
    data.push(d.late);
  }
  var chart = new uPlot(opts, data, holder);
  chart.over.addEventListener("click", function () {
    if (chart.select.width >= 4) return; // the end of a drag, handled by setSelect
    if (chart.cursor.left == null || chart.cursor.left < 0) return;
    var v = chart.posToVal(chart.cursor.left, "x"), i = n - 1;
    while (i > 0 && d.edges[i] > v) i--; // the bucket under the pointer (uPlot's cursor.idx is the nearest start)
    location.href = d.zoom + "?from=" + d.edges[i] + "&to=" + d.edges[i + 1];
  });
  window.chronologTimeline = chart; // the chart, for anyone who wants to read what it drew (the browser tests do)
})();
