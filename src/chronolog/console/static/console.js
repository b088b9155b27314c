// chronolog console: drag across the timeline to read the records of that window. Shipped in the package.
(function () {
  var svg = document.querySelector("svg.chart[data-start]");
  if (!svg) return;
  var start = Number(svg.dataset.start), end = Number(svg.dataset.end);
  var left = Number(svg.dataset.left), width = Number(svg.dataset.width);
  var sel = svg.querySelector("rect.sel"), from = null, moved = false;
  function x(ev) {
    var r = svg.getBoundingClientRect();
    return Math.min(Math.max((ev.clientX - r.left) * (svg.viewBox.baseVal.width / r.width), left), left + width);
  }
  function time(px) { return Math.round(start + (px - left) / width * (end - start)); }
  svg.addEventListener("mousedown", function (ev) { from = x(ev); moved = false; ev.preventDefault(); });
  svg.addEventListener("mousemove", function (ev) {
    if (from === null) return;
    var to = x(ev);
    if (Math.abs(to - from) > 3) moved = true;
    sel.setAttribute("x", Math.min(from, to)); sel.setAttribute("width", Math.abs(to - from));
  });
  svg.addEventListener("click", function (ev) { if (moved) ev.preventDefault(); }, true);
  window.addEventListener("mouseup", function (ev) {
    if (from === null) return;
    var to = x(ev), a = time(Math.min(from, to)), b = time(Math.max(from, to));
    from = null;
    if (!moved || b <= a) return;
    location.href = svg.dataset.records + "?from=" + a + "&to=" + b;
  });
})();
