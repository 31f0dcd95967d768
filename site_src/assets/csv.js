/* cardgen: every table and chart of a page can be downloaded as CSV. A "CSV" link goes after each table (the rows
   shown, as the page shows them: filtered and sorted) and under each chart (every point: series, label, x, y, the
   exact values the chart drew, from its markers' data-x and data-y). The file is made when the link is clicked.
   Shipped with the site (no CDN). */
(function () {
  "use strict";

  function cell(value) {
    var text = String(value === null || value === undefined ? "" : value).replace(/\s+/g, " ").trim();
    return /[",\n]/.test(text) ? '"' + text.replace(/"/g, '""') + '"' : text;
  }

  function line(values) { return values.map(cell).join(","); }

  function tableCsv(table) {
    var lines = [];
    Array.prototype.forEach.call(table.rows, function (row) {
      if (row.hidden) { return; }
      lines.push(line(Array.prototype.map.call(row.cells, function (c) { return c.textContent; })));
    });
    return lines.join("\n") + "\n";
  }

  function chartCsv(chart) {
    var lines = [line(["series", "label", "x", "y"])];
    Array.prototype.forEach.call(chart.querySelectorAll("g[data-series]"), function (group) {
      Array.prototype.forEach.call(group.querySelectorAll("circle[data-x]"), function (marker) {
        var target = marker.parentNode && marker.parentNode.tagName.toLowerCase() === "a" ? marker.parentNode : marker;
        if (target.style && target.style.display === "none") { return; }  // filtered out of the leaderboard
        lines.push(line([group.getAttribute("data-series"), marker.getAttribute("data-label") || "",
                         marker.getAttribute("data-x"), marker.getAttribute("data-y")]));
      });
    });
    return lines.join("\n") + "\n";
  }

  function slug(text, fallback) {
    var s = String(text || "").toLowerCase().replace(/[^a-z0-9]+/g, "-").replace(/^-+|-+$/g, "").slice(0, 60);
    return s || fallback;
  }

  function heading(node) {
    var el = node;
    while (el) {
      var prev = el.previousElementSibling;
      while (prev) {
        if (/^H[1-4]$/.test(prev.tagName)) { return prev.textContent.replace(/¶/g, ""); }
        prev = prev.previousElementSibling;
      }
      el = el.parentElement;
    }
    return document.title;
  }

  function link(name, make) {
    var a = document.createElement("a");
    a.className = "cardgen-csv";
    a.textContent = "CSV";
    a.setAttribute("download", name + ".csv");
    a.setAttribute("title", "Download as CSV");
    a.href = "#";
    a.addEventListener("click", function () {
      a.href = "data:text/csv;charset=utf-8," + encodeURIComponent(make());
    });
    return a;
  }

  function init() {
    var used = {};
    function unique(name) {
      used[name] = (used[name] || 0) + 1;
      return used[name] > 1 ? name + "-" + used[name] : name;
    }
    Array.prototype.forEach.call(document.querySelectorAll("article table"), function (table) {
      var a = link(unique(slug(heading(table), "table")), function () { return tableCsv(table); });
      var p = document.createElement("p");
      p.className = "cardgen-csv-line";
      p.appendChild(a);
      table.parentNode.insertBefore(p, table.nextSibling);
    });
    Array.prototype.forEach.call(document.querySelectorAll("article .cardgen-chart"), function (chart) {
      var title = chart.querySelector("svg title");
      var a = link(unique(slug(title ? title.textContent : heading(chart), "chart")), function () {
        return chartCsv(chart);
      });
      chart.appendChild(a);
    });
  }

  window.cardgenCsv = {table: tableCsv, chart: chartCsv};
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
