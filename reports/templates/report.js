// The report's only script. It unpacks plotly.js and the trajectory browser's rows (gzip + base64,
// so the page stays a few MB), draws every figure from its JSON, and runs the browser: filter rows
// by run, outcome, class and text, page through them, click (or Enter) to open a transcript. Text
// from the logs only ever goes into textContent and attributes: it never becomes markup or code.
(function () {
  "use strict";
  var PAGE = 50;
  var MISSING = "\u2014";

  function unpack(id) {
    var el = document.getElementById(id);
    if (!el) {
      return Promise.resolve(null);
    }
    if (typeof DecompressionStream === "undefined") {
      return Promise.reject(new Error("this browser has no DecompressionStream (Chrome 80+, " +
        "Firefox 113+ and Safari 16.4+ have it)"));
    }
    var bin = atob(el.textContent.trim());
    var bytes = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i += 1) {
      bytes[i] = bin.charCodeAt(i);
    }
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return new Response(stream).text();
  }

  function notice(el, text) {
    var p = document.createElement("p");
    p.className = "note";
    p.textContent = text;
    el.appendChild(p);
  }

  // ---- figures ----
  function drawFigures() {
    document.querySelectorAll("script.figure-data").forEach(function (el) {
      var fig = JSON.parse(el.textContent);
      var div = document.getElementById(el.dataset.for);
      window.Plotly.newPlot(div, fig.data, fig.layout, { displaylogo: false, responsive: true });
    });
  }

  unpack("plotly-packed").then(function (code) {
    var s = document.createElement("script");
    s.textContent = code;
    document.head.appendChild(s);
    drawFigures();
  }).catch(function (err) {
    document.querySelectorAll("div.plotly-graph-div").forEach(function (div) {
      notice(div, "Charts could not be drawn: " + err.message + ".");
    });
  });

  // ---- trajectory browser ----
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) {
      e.className = cls;
    }
    if (text !== undefined && text !== null) {
      e.textContent = text;
    }
    return e;
  }

  function fmt(v, kind) {
    if (v === null || v === undefined || (typeof v === "number" && isNaN(v))) {
      return MISSING;
    }
    if (typeof v === "boolean") {
      return v ? "yes" : "no";
    }
    if (kind === "float") {
      return v.toLocaleString("en-US", { minimumFractionDigits: 3, maximumFractionDigits: 3 });
    }
    if (kind === "int") {
      return v.toLocaleString("en-US");
    }
    return String(v);
  }

  function pages(list) {
    var span = el("span", "pages");
    (list || []).forEach(function (p) {
      var s = el("span", "page " + p.mark, p.page);
      s.title = p.mark.replace("_", " ");
      span.appendChild(s);
    });
    return span;
  }

  function transcript(r) {
    var tr = el("tr", "transcript");
    var td = el("td");
    td.colSpan = 10;
    var tx = el("div", "tx");
    var dl = el("dl", "facts");
    function fact(name, value, cls) {
      dl.appendChild(el("dt", null, name));
      var dd = el("dd", cls || null);
      if (value instanceof Node) {
        dd.appendChild(value);
      } else {
        dd.textContent = value;
      }
      dl.appendChild(dd);
    }
    fact("question", fmt(r.question));
    fact("reference answer", fmt(r.reference_answer));
    fact("golden pages", (r.reference_pages || []).join(", "));
    fact("retrieved pages", pages(r.retrieved));
    fact("answer", fmt(r.answer), "answer");
    fact("scores", "judge " + fmt(r.judge_score, "float") + " \u00b7 NDCG " + fmt(r.ndcg, "float") +
      " \u00b7 reward " + fmt(r.reward, "float") + " \u00b7 format " + fmt(r.format_ok) +
      " \u00b7 ended " + fmt(r.terminated));
    tx.appendChild(dl);
    var ol = el("ol", "turns");
    (r.turns || []).forEach(function (t) {
      var li = el("li", "turn " + t.action + (t.forced ? " forced" : ""));
      li.appendChild(el("div", "think", fmt(t.think)));
      var act = el("div", "action");
      act.appendChild(el("span", "act", t.action));
      if (t.forced) {
        act.appendChild(document.createTextNode(" "));
        act.appendChild(el("span", "badge", "forced completion"));
      }
      if (t.arg !== null && t.arg !== undefined) {
        act.appendChild(document.createTextNode(" "));
        act.appendChild(el("code", null, t.arg));
      }
      if (t.value !== null && t.value !== undefined) {
        act.appendChild(document.createTextNode(" "));
        act.appendChild(el("span", "value", "value " + fmt(t.value, "float")));
      }
      li.appendChild(act);
      if (t.error) {
        li.appendChild(el("div", "error", t.error));
      }
      if (t.retrieved && t.retrieved.length) {
        var ret = el("div", "retrieved");
        ret.appendChild(pages(t.retrieved));
        li.appendChild(ret);
      }
      if (t.observation) {
        li.appendChild(el("div", "observation", t.observation));
      }
      ol.appendChild(li);
    });
    tx.appendChild(ol);
    td.appendChild(tx);
    tr.appendChild(td);
    return tr;
  }

  function trajRow(r) {
    var tr = el("tr", "traj");
    tr.tabIndex = 0;
    tr.setAttribute("aria-expanded", "false");
    tr.dataset.run = r.run_id;
    tr.dataset.outcome = r.outcome;
    tr.dataset.tags = r.tags.join(" ");
    [r.run_id, fmt(r.step, "int"), r.uid, fmt(r.rollout_idx, "int")].forEach(function (v) {
      tr.appendChild(el("td", null, v));
    });
    var oc = el("td");
    oc.appendChild(el("span", "outcome " + r.outcome, r.outcome));
    tr.appendChild(oc);
    var tags = el("td");
    r.tags.forEach(function (t) {
      tags.appendChild(el("span", "badge", t));
    });
    tr.appendChild(tags);
    tr.appendChild(el("td", null, fmt(r.judge_score, "float")));
    tr.appendChild(el("td", null, fmt(r.ndcg, "float")));
    tr.appendChild(el("td", null, fmt(r.num_turns, "int")));
    tr.appendChild(el("td", "q", fmt(r.question)));
    tr.record = r;
    return tr;
  }

  function browser(rows) {
    var table = document.getElementById("browser-table");
    var body = table.tBodies[0];
    var q = document.getElementById("browser-q");
    var run = document.getElementById("browser-run");
    var outcome = document.getElementById("browser-outcome");
    var tag = document.getElementById("browser-tag");
    var count = document.getElementById("browser-count");
    var prev = document.getElementById("browser-prev");
    var next = document.getElementById("browser-next");
    var where = document.getElementById("browser-page");
    var texts = rows.map(function (r) {
      var parts = [r.run_id, r.uid, r.question, r.reference_answer, r.answer];
      (r.turns || []).forEach(function (t) {
        parts.push(t.think, t.arg, t.observation);
      });
      return parts.filter(function (x) { return x; }).join(" ").toLowerCase();
    });
    var hits = [];
    var page = 0;

    function matches(r, i, needle) {
      return (!run.value || r.run_id === run.value) &&
        (!outcome.value || r.outcome === outcome.value) &&
        (!tag.value || r.tags.indexOf(tag.value) >= 0) &&
        (!needle || texts[i].indexOf(needle) >= 0);
    }

    function show() {
      var pages = Math.max(1, Math.ceil(hits.length / PAGE));
      page = Math.min(Math.max(page, 0), pages - 1);
      body.replaceChildren();
      hits.slice(page * PAGE, (page + 1) * PAGE).forEach(function (i) {
        body.appendChild(trajRow(rows[i]));
      });
      count.textContent = hits.length + " of " + rows.length + " shown";
      where.textContent = "page " + (page + 1) + " of " + pages;
      prev.disabled = page === 0;
      next.disabled = page >= pages - 1;
    }

    function apply() {
      var needle = q.value.trim().toLowerCase();
      hits = [];
      rows.forEach(function (r, i) {
        if (matches(r, i, needle)) {
          hits.push(i);
        }
      });
      page = 0;
      show();
    }

    function toggle(row) {
      var after = row.nextElementSibling;
      if (after && after.classList.contains("transcript")) {
        after.remove();
        row.setAttribute("aria-expanded", "false");
      } else {
        row.after(transcript(row.record));
        row.setAttribute("aria-expanded", "true");
      }
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
    [q, run, outcome, tag].forEach(function (x) {
      x.addEventListener("input", apply);
    });
    prev.addEventListener("click", function () { page -= 1; show(); });
    next.addEventListener("click", function () { page += 1; show(); });
    apply();
    table.dataset.ready = "true";
  }

  // ---- downloads cut from a list the page carries once ----
  // A part link (data-slice-of) names the whole list's link and the byte range of its rows after
  // the header; on the first click it gets a blob of the header and those bytes, which the
  // browser then saves as the link's own file (the click's default action reads the new href).
  document.querySelectorAll("a[data-slice-of]").forEach(function (a) {
    a.addEventListener("click", function () {
      if (a.dataset.ready) {
        return;
      }
      var whole = Array.prototype.find.call(document.querySelectorAll("a[download]"), function (x) {
        return !x.dataset.sliceOf && x.getAttribute("download") === a.dataset.sliceOf;
      });
      var bin = atob(whole.getAttribute("href").split(",", 2)[1]);
      var bytes = new Uint8Array(bin.length);
      for (var i = 0; i < bin.length; i += 1) {
        bytes[i] = bin.charCodeAt(i);
      }
      var head = bytes.indexOf(10) + 1;
      var span = a.dataset.span.split("-").map(Number);
      var blob = new Blob([bytes.subarray(0, head), bytes.subarray(head + span[0], head + span[1])],
        { type: "text/csv;charset=utf-8" });
      a.href = URL.createObjectURL(blob);
      a.dataset.ready = "true";
    });
  });

  if (document.getElementById("browser-data")) {
    unpack("browser-data").then(function (text) {
      browser(JSON.parse(text));
    }).catch(function (err) {
      notice(document.querySelector(".browser"), "The rollouts could not be unpacked: " +
        err.message + ".");
    });
  }
})();
