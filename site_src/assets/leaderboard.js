/* cardgen leaderboard: sort by clicking a column header, filter by text, GPU and measured/modelled; the charts
   above the table show the rows that pass; the trade-off chart's axes are chosen (every pair is drawn, one is
   shown). The view (filters, sort and axes) is kept in the page's address, after "#", so a copied link opens the
   same view. Shipped with the site (no CDN). Cells carry their sort value in data-sort; empty values sort last. */
(function () {
  "use strict";

  var KEYS = ["q", "gpu", "kind", "sort", "dir", "x", "y"];
  var AXES = {x: "user", y: "tput"};  // the trade-off chart's default axes (cardgen.site.tradeoff.DEFAULT)

  function readHash() {
    var state = {};
    (window.location.hash || "").replace(/^#/, "").split("&").forEach(function (part) {
      var eq = part.indexOf("=");
      if (eq > 0) {
        var key = decodeURIComponent(part.slice(0, eq));
        if (KEYS.indexOf(key) !== -1) { state[key] = decodeURIComponent(part.slice(eq + 1)); }
      }
    });
    return state;
  }

  function writeHash(state) {
    var parts = KEYS.filter(function (k) { return state[k]; }).map(function (k) {
      return encodeURIComponent(k) + "=" + encodeURIComponent(state[k]);
    });
    var url = window.location.pathname + window.location.search + (parts.length ? "#" + parts.join("&") : "");
    if (window.history && window.history.replaceState) {
      window.history.replaceState(null, "", url);
    }
  }

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

  function sortBy(table, index, ascending) {
    var th = table.tHead.rows[0].cells[index];
    if (!th) { return; }
    var numeric = th.getAttribute("data-type") === "number";
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
    var gpuSelect = board.querySelector(".cardgen-gpu");
    var select = board.querySelector(".cardgen-kind");
    var count = board.querySelector(".cardgen-count");
    var words = (input ? input.value : "").toLowerCase().split(/\s+/).filter(Boolean);
    var gpu = gpuSelect ? gpuSelect.value : "";
    var kind = select ? select.value : "";
    var rows = table.tBodies[0].rows;
    var shown = 0;
    var visible = {};
    Array.prototype.forEach.call(rows, function (row) {
      var text = row.textContent.toLowerCase();
      var gpuCell = row.cells[1] ? row.cells[1].getAttribute("data-sort") : "";
      var ok = (!kind || row.getAttribute("data-kind") === kind) && (!gpu || gpuCell === gpu) &&
        words.every(function (w) { return text.indexOf(w) !== -1; });
      row.hidden = !ok;
      if (ok) {
        shown += 1;
        visible[row.getAttribute("data-key")] = true;
      }
    });
    Array.prototype.forEach.call(board.querySelectorAll(".cardgen-chart [data-key]"), function (marker) {
      var target = marker.parentNode && marker.parentNode.tagName.toLowerCase() === "a" ? marker.parentNode : marker;
      target.style.display = visible[marker.getAttribute("data-key")] ? "" : "none";
    });
    if (count) {
      count.textContent = shown === rows.length ? rows.length + " runs" : shown + " of " + rows.length + " runs";
    }
  }

  function showAxes(board, x, y) {
    var xSelect = board.querySelector(".cardgen-axis-x");
    var ySelect = board.querySelector(".cardgen-axis-y");
    if (!xSelect || !ySelect) { return; }
    xSelect.value = x;
    ySelect.value = y;
    if (xSelect.value !== x) { xSelect.value = AXES.x; }  // a value the page does not offer: the default
    if (ySelect.value !== y) { ySelect.value = AXES.y; }
    Array.prototype.forEach.call(board.querySelectorAll(".cardgen-tradeoff-view"), function (view) {
      view.hidden = !(view.getAttribute("data-x") === xSelect.value && view.getAttribute("data-y") === ySelect.value);
    });
  }

  function currentState(board, table) {
    var input = board.querySelector(".cardgen-filter");
    var gpuSelect = board.querySelector(".cardgen-gpu");
    var select = board.querySelector(".cardgen-kind");
    var xSelect = board.querySelector(".cardgen-axis-x");
    var ySelect = board.querySelector(".cardgen-axis-y");
    var state = {q: input ? input.value : "", gpu: gpuSelect ? gpuSelect.value : "",
                 kind: select ? select.value : ""};
    if (xSelect && xSelect.value !== AXES.x) { state.x = xSelect.value; }
    if (ySelect && ySelect.value !== AXES.y) { state.y = ySelect.value; }
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, index) {
      var sort = th.getAttribute("aria-sort");
      if (sort === "ascending" || sort === "descending") {
        state.sort = String(index + 1);
        state.dir = sort === "ascending" ? "asc" : "desc";
      }
    });
    return state;
  }

  function restore(board, table) {
    var state = readHash();
    var input = board.querySelector(".cardgen-filter");
    var gpuSelect = board.querySelector(".cardgen-gpu");
    var select = board.querySelector(".cardgen-kind");
    if (input) { input.value = state.q || ""; }
    if (gpuSelect) { gpuSelect.value = state.gpu || ""; }
    if (select) { select.value = state.kind || ""; }
    var column = parseInt(state.sort || "", 10);
    if (column >= 1) { sortBy(table, column - 1, state.dir !== "desc"); }
    showAxes(board, state.x || AXES.x, state.y || AXES.y);
    applyFilter(board, table);
  }

  function setup(board) {
    var table = board.querySelector("table");
    if (!table || !table.tHead || !table.tBodies.length) { return; }
    var save = function () { writeHash(currentState(board, table)); };
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, index) {
      var button = th.querySelector("button");
      if (button) {
        button.addEventListener("click", function () {
          sortBy(table, index, th.getAttribute("aria-sort") !== "ascending");
          save();
        });
      }
    });
    var update = function () { applyFilter(board, table); save(); };
    var input = board.querySelector(".cardgen-filter");
    var gpuSelect = board.querySelector(".cardgen-gpu");
    var select = board.querySelector(".cardgen-kind");
    if (input) { input.addEventListener("input", update); }
    if (gpuSelect) { gpuSelect.addEventListener("change", update); }
    if (select) { select.addEventListener("change", update); }
    Array.prototype.forEach.call(board.querySelectorAll(".cardgen-axis-x, .cardgen-axis-y"), function (axis) {
      axis.addEventListener("change", function () {
        var xSelect = board.querySelector(".cardgen-axis-x");
        var ySelect = board.querySelector(".cardgen-axis-y");
        showAxes(board, xSelect.value, ySelect.value);
        save();
      });
    });
    window.addEventListener("hashchange", function () { restore(board, table); });
    restore(board, table);
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
