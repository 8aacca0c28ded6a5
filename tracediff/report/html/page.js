// tracediff's HTML report (report/html/page.py inlines this file): the attribution table's
// sorting, filters and search, then plotly.js unpacked from the page and the figures drawn.
// Nothing here fetches: the page's Content-Security-Policy forbids it.
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("td-data").textContent);

  function setupTable(table) {
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    var heads = table.tHead.rows[0].cells;
    Array.prototype.forEach.call(heads, function (th, col) {
      var type = th.getAttribute("data-type");
      if (type === "none") return;
      th.addEventListener("click", function () {
        var asc = !th.classList.contains("asc");
        Array.prototype.forEach.call(heads, function (o) { o.classList.remove("asc", "desc"); });
        th.classList.add(asc ? "asc" : "desc");
        var key = function (tr) {
          var td = tr.cells[col];
          if (type === "num") {
            var v = td.getAttribute("data-v");
            return v === "" || v === null ? NaN : parseFloat(v);
          }
          return td.textContent.toLowerCase();
        };
        rows.sort(function (a, b) {
          var x = key(a), y = key(b);
          if (type === "num") {  // unknown (NaN) last either way
            if (isNaN(x) || isNaN(y)) return isNaN(x) - isNaN(y);
            return asc ? x - y : y - x;
          }
          return asc ? (x < y ? -1 : x > y ? 1 : 0) : (x < y ? 1 : x > y ? -1 : 0);
        });
        rows.forEach(function (tr) { body.appendChild(tr); });
      });
    });
    return rows;
  }

  function setupFilters(block, rows) {
    var box = block.querySelector(".filters");
    var selects = box.querySelectorAll("select[data-filter]");
    Array.prototype.forEach.call(selects, function (sel) {
      var key = sel.getAttribute("data-filter");
      var seen = {};
      rows.forEach(function (tr) { seen[tr.getAttribute("data-" + key)] = true; });
      Object.keys(seen).sort().forEach(function (v) {
        var o = document.createElement("option");
        o.value = v; o.textContent = v;
        sel.appendChild(o);
      });
      sel.addEventListener("change", apply);
    });
    var search = box.querySelector(".search");
    var sigonly = box.querySelector(".sigonly");
    search.addEventListener("input", apply);
    sigonly.addEventListener("change", apply);
    function apply() {
      var want = {};
      Array.prototype.forEach.call(selects, function (sel) { want[sel.getAttribute("data-filter")] = sel.value; });
      var q = search.value.trim().toLowerCase();
      var shown = 0;
      rows.forEach(function (tr) {
        var ok = Object.keys(want).every(function (k) { return !want[k] || tr.getAttribute("data-" + k) === want[k]; });
        ok = ok && (!q || tr.getAttribute("data-name").indexOf(q) >= 0 || tr.cells[0].textContent.toLowerCase() === q);
        ok = ok && (!sigonly.checked || tr.classList.contains("sig"));
        tr.style.display = ok ? "" : "none";
        if (ok) shown += 1;
      });
      box.querySelector(".shown").textContent = shown + " of " + rows.length + " rows";
    }
    apply();
  }

  function loadPlotly() {
    var packed = document.getElementById("td-plotly").textContent;
    var bytes = Uint8Array.from(atob(packed), function (ch) { return ch.charCodeAt(0); });
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate-raw"));
    return new Response(stream).text().then(function (code) {
      var s = document.createElement("script");
      s.textContent = code;
      document.head.appendChild(s);
    });
  }

  function draw() {
    var config = { displaylogo: false, responsive: true };
    return Promise.all(data.figures.map(function (f) {
      var el = document.getElementById("fig-" + f.key);
      var cfg = Object.assign({ scrollZoom: !!f.zoom }, config);
      return window.Plotly.newPlot(el, f.data, f.layout, cfg);
    }));
  }

  document.querySelectorAll(".attr-block").forEach(function (block) {
    setupFilters(block, setupTable(block.querySelector("table.attribution")));
  });
  document.querySelectorAll("table.sortable").forEach(setupTable);
  if (!data.figures.length) { document.body.setAttribute("data-ready", "1"); return; }
  if (typeof DecompressionStream === "undefined") {
    document.body.setAttribute("data-ready", "no-charts");
    var p = document.createElement("p");
    p.id = "charts-status";
    p.textContent = "The pictures need a browser with DecompressionStream (2023 or later); the tables work without them.";
    (document.querySelector("section.charts") || document.body).prepend(p);
    return;
  }
  loadPlotly().then(draw).then(function () {
    document.body.setAttribute("data-ready", "1");
  }, function (err) {
    document.body.setAttribute("data-ready", "failed");
    console.error("tracediff: the pictures could not be drawn: " + err);
  });
})();
