/* cardgen leaderboard: sort by clicking a column header, filter by text and by measured/modelled.
   Shipped with the site (no CDN). Cells carry their sort value in data-sort; empty values sort last. */
(function () {
  "use strict";

  function cellValue(row, index, numeric) {
    var cell = row.cells[index];
    var raw = cell ? cell.getAttribute("data-sort") : "";
    if (raw === null || raw === "") { return null; }
    if (numeric) {
      var n = parseFloat(raw);
      return isNaN(n) ? null : n;
    }
    return raw;
  }

  function sortBy(table, th, index) {
    var numeric = th.getAttribute("data-type") === "number";
    var ascending = th.getAttribute("aria-sort") !== "ascending";
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = cellValue(a, index, numeric);
      var y = cellValue(b, index, numeric);
      if (x === null && y === null) { return 0; }
      if (x === null) { return 1; }
      if (y === null) { return -1; }
      var order = numeric ? x - y : String(x).localeCompare(String(y));
      return ascending ? order : -order;
    });
    rows.forEach(function (row) { body.appendChild(row); });
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (other) {
      other.setAttribute("aria-sort", "none");
    });
    th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
  }

  function applyFilter(board, table) {
    var input = board.querySelector(".cardgen-filter");
    var select = board.querySelector(".cardgen-kind");
    var count = board.querySelector(".cardgen-count");
    var words = (input ? input.value : "").toLowerCase().split(/\s+/).filter(Boolean);
    var kind = select ? select.value : "";
    var rows = table.tBodies[0].rows;
    var shown = 0;
    Array.prototype.forEach.call(rows, function (row) {
      var text = row.textContent.toLowerCase();
      var ok = (!kind || row.getAttribute("data-kind") === kind) &&
        words.every(function (w) { return text.indexOf(w) !== -1; });
      row.hidden = !ok;
      if (ok) { shown += 1; }
    });
    if (count) {
      count.textContent = shown === rows.length ? rows.length + " runs" : shown + " of " + rows.length + " runs";
    }
  }

  function setup(board) {
    var table = board.querySelector("table");
    if (!table || !table.tHead || !table.tBodies.length) { return; }
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, index) {
      var button = th.querySelector("button");
      if (button) {
        button.addEventListener("click", function () { sortBy(table, th, index); });
      }
    });
    var update = function () { applyFilter(board, table); };
    var input = board.querySelector(".cardgen-filter");
    var select = board.querySelector(".cardgen-kind");
    if (input) { input.addEventListener("input", update); }
    if (select) { select.addEventListener("change", update); }
  }

  function init() {
    Array.prototype.forEach.call(document.querySelectorAll(".cardgen-board"), setup);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
