// The trajectory browser: filter rows by run, outcome, class and text; click (or Enter) opens a
// transcript. It only reads data attributes and textContent and toggles `hidden`: it never writes
// markup, so text from the logs cannot become code.
(function () {
  "use strict";
  var table = document.getElementById("browser-table");
  if (!table) {
    return;
  }
  var q = document.getElementById("browser-q");
  var run = document.getElementById("browser-run");
  var outcome = document.getElementById("browser-outcome");
  var tag = document.getElementById("browser-tag");
  var count = document.getElementById("browser-count");
  var rows = Array.prototype.slice.call(table.querySelectorAll("tr.traj"));
  var texts = new Map();

  function haystack(row) {
    if (!texts.has(row)) {
      texts.set(row, (row.textContent + " " + row.nextElementSibling.textContent).toLowerCase());
    }
    return texts.get(row);
  }

  function matches(row, needle) {
    var d = row.dataset;
    return (!run.value || d.run === run.value) &&
      (!outcome.value || d.outcome === outcome.value) &&
      (!tag.value || d.tags.split(" ").indexOf(tag.value) >= 0) &&
      (!needle || haystack(row).indexOf(needle) >= 0);
  }

  function apply() {
    var needle = q.value.trim().toLowerCase();
    var shown = 0;
    rows.forEach(function (row) {
      var ok = matches(row, needle);
      row.hidden = !ok;
      if (!ok) {
        row.nextElementSibling.hidden = true;
        row.setAttribute("aria-expanded", "false");
      } else {
        shown += 1;
      }
    });
    count.textContent = shown + " of " + rows.length + " shown";
  }

  function toggle(row) {
    var detail = row.nextElementSibling;
    detail.hidden = !detail.hidden;
    row.setAttribute("aria-expanded", detail.hidden ? "false" : "true");
  }

  table.addEventListener("click", function (e) {
    var row = e.target.closest("tr.traj");
    if (row) {
      toggle(row);
    }
  });
  table.addEventListener("keydown", function (e) {
    var row = e.target.closest("tr.traj");
    if (row && (e.key === "Enter" || e.key === " ")) {
      e.preventDefault();
      toggle(row);
    }
  });
  [q, run, outcome, tag].forEach(function (el) {
    el.addEventListener("input", apply);
  });
  apply();
})();
