// chronolog console: the timeline chart, drawn by the vendored uPlot from the series the server put in the
// page (<script type="application/json" id="timeline-data">). A click on a bar zooms into its bucket; a drag
// across the chart opens the records of the dragged window; the log-scale box redraws the bars on a log axis.
// Shipped in the package, nothing fetched.
(function () {
  var holder = document.getElementById("timeline");
  var source = document.getElementById("timeline-data");
  if (!holder || !source || typeof uPlot === "undefined") return;
  var d = JSON.parse(source.textContent);
  var n = d.totals.length;
  if (!n) return;
  var starts = d.edges.slice(0, n);
  var lo = d.edges[0], hi = d.edges[n];
  var SEC = 1000, MIN = 60 * SEC, HOUR = 60 * MIN, DAY = 24 * HOUR, YEAR = 365 * DAY;
  // label intervals: round UTC widths, as the buckets' own (ticks fall on bucket edges, never between)
  var ROUND = [SEC, 2 * SEC, 5 * SEC, 10 * SEC, 15 * SEC, 30 * SEC, MIN, 2 * MIN, 5 * MIN, 10 * MIN, 15 * MIN,
               30 * MIN, HOUR, 2 * HOUR, 3 * HOUR, 6 * HOUR, 12 * HOUR, DAY, 2 * DAY, 7 * DAY, 14 * DAY, 30 * DAY,
               YEAR, 2 * YEAR, 5 * YEAR, 10 * YEAR, 20 * YEAR, 50 * YEAR, 100 * YEAR];

  function label(ms) { return new Date(ms).toISOString().replace("T", " ").replace(".000Z", "Z"); }
  // axis ticks in UTC, as every time the console prints: the date for steps of a day or more, else the clock
  // (with seconds below a minute); a tick at midnight of a finer axis shows its date too
  function tick(ms, incr) {
    var iso = new Date(ms).toISOString(); // 2005-06-14T15:16:01.000Z
    if (incr >= DAY) return iso.slice(0, 10);
    var clock = incr >= MIN ? iso.slice(11, 16) : iso.slice(11, 19);
    return iso.slice(11, 19) === "00:00:00" ? iso.slice(5, 10) + " " + clock : clock;
  }
  // the x ticks: multiples of the smallest round interval (a multiple of the bucket width) that puts at most
  // one label per 110 px; never none, so the axis is always labelled; none so near the right end that its text
  // would be cut by the chart's right edge
  function ticks(width) {
    var most = Math.max(2, Math.floor(width / 110)), step = d.step || (hi - lo) / n, incr = null;
    var fits = function (c) { return (hi - lo) / c <= most; };
    var round = ROUND.filter(function (r) { return r % step === 0; });
    incr = round.filter(fits)[0] || null;
    if (incr === null) { // wider than the list: whole multiples of the widest round interval
      var base = round.length ? round[round.length - 1] : step;
      for (var k = 1; incr === null; k *= 2) if (fits(base * k)) incr = base * k;
    }
    var edge = 45 * (hi - lo) / Math.max(width, 1); // half a date label, in ms
    var out = [];
    for (var t = Math.ceil(lo / incr) * incr; t <= hi; t += incr) {
      if (hi - t >= edge) out.push(t); // (the left end has the y axis's gutter to spill into)
    }
    if (!out.length) out.push(Math.ceil((lo + hi) / 2 / step) * step); // one label, on a bucket edge
    return { incr: incr, splits: out };
  }

  var logBox = document.getElementById("log-scale");
  var chart = null;

  function draw(log) {
    var width = Math.max(holder.clientWidth || 0, 600);
    var xt = ticks(width - 70);
    var bars = uPlot.paths.bars({ size: [1, Infinity], gap: 1, align: 1 });
    // on a log axis an empty bucket has no bar (log 0), not a bar down to the axis' floor
    var shown = function (v) { return log && !v ? null : v; };
    var opts = {
      width: width,
      height: 280,
      ms: 1, // x values are epoch milliseconds, as every time in chronolog
      tzDate: function (ts) { return uPlot.tzDate(new Date(ts), "Etc/UTC"); },
      scales: { x: { time: true, range: function () { return [lo, hi]; } },
                y: log ? { distr: 3, log: 10, range: function (u, a, b) { return [1, Math.max(10, b * 1.2)]; } }
                       : { range: function (u, a, b) { return [0, Math.max(b, 1)]; } } },
      cursor: { drag: { x: true, y: false, setScale: false }, points: { show: false } },
      legend: { show: true },
      series: [
        { label: "bucket start (UTC)", value: function (u, v) { return v == null ? "-" : label(v); } },
        { label: "records", fill: "#4a7bd0", stroke: "#4a7bd0", width: 0, paths: bars, points: { show: false } },
      ],
      axes: [{ label: "record time (UTC), buckets of " + stepText(d.step), labelSize: 20, space: 110,
               splits: function () { return xt.splits; },
               values: function (u, splits) { return splits.map(function (v) { return tick(v, xt.incr); }); } },
             { label: log ? "records (log scale)" : "records", labelSize: 20, size: 60 }],
      hooks: {
        setSelect: [function (u) {
          if (u.select.width < 4) return;
          var a = Math.round(u.posToVal(u.select.left, "x"));
          var b = Math.round(u.posToVal(u.select.left + u.select.width, "x"));
          a = Math.max(a, lo);
          b = Math.min(b, hi);
          if (b > a) location.href = d.records + "?from=" + a + "&to=" + b;
        }],
      },
    };
    var data = [starts, d.totals.map(shown)];
    if (d.late) { // exact counts only (a data dir, or a broker's records read): late records are known
      opts.series.push({ label: "late records", fill: "#e8892b", stroke: "#e8892b", width: 0, paths: bars,
                         points: { show: false } });
      data.push(d.late.map(shown));
    }
    if (chart) chart.destroy();
    chart = new uPlot(opts, data, holder);
    chart.over.addEventListener("click", function () {
      if (chart.select.width >= 4) return; // the end of a drag, handled by setSelect
      if (chart.cursor.left == null || chart.cursor.left < 0) return;
      var v = chart.posToVal(chart.cursor.left, "x"), i = n - 1;
      while (i > 0 && d.edges[i] > v) i--; // the bucket under the pointer (uPlot's cursor.idx is the nearest start)
      location.href = d.zoom + "?from=" + d.edges[i] + "&to=" + d.edges[i + 1];
    });
    window.chronologTimeline = chart; // the chart, for anyone who wants to read what it drew (the browser tests do)
  }

  function stepText(ms) {
    var units = [["d", DAY], ["h", HOUR], ["min", MIN], ["s", SEC]];
    for (var i = 0; i < units.length; i++) if (ms % units[i][1] === 0) return ms / units[i][1] + " " + units[i][0];
    return ms + " ms";
  }

  var wanted = /(^|[?&])log=1(&|$)/.test(location.search);
  if (logBox) {
    logBox.checked = wanted;
    logBox.addEventListener("change", function () {
      draw(logBox.checked);
      // keep the choice in the address, so a reload or a shared link shows the same axis
      var url = new URL(location.href);
      if (logBox.checked) url.searchParams.set("log", "1"); else url.searchParams.delete("log");
      history.replaceState(null, "", url.toString());
    });
  }
  draw(wanted);
})();
