// ddai explorer: the SQL box and the sections chart. Every text from the server is set with
// textContent, never as HTML, so query results stay text however they are written.
"use strict";

function cellText(v) {
  if (v === null || v === undefined) return "—";
  if (typeof v === "object") return JSON.stringify(v);
  return String(v);
}

// The link of a result row that names a rollout (run_id, uid, rollout_idx, with step when the
// result has it) or a prompt's group (run_id, uid); null otherwise.
function rowLink(columns, row) {
  const at = name => columns.indexOf(name);
  const [run, uid, idx, step] = ["run_id", "uid", "rollout_idx", "step"].map(at);
  if (run < 0 || uid < 0 || row[run] === null || row[uid] === null) return null;
  const q = new URLSearchParams({run: String(row[run]), uid: String(row[uid])});
  if (idx >= 0 && row[idx] !== null) {
    if (step >= 0) q.set("step", row[step] === null ? "" : String(row[step]));
    q.set("idx", String(row[idx]));
    return {href: `/rollout?${q}`, cls: "rollout-link"};
  }
  return {href: `/group?uid=${encodeURIComponent(row[uid])}&run=${encodeURIComponent(row[run])}`,
          cls: "group-link"};
}

function renderTable(table, columns, rows) {
  table.replaceChildren();
  const head = table.createTHead().insertRow();
  for (const c of columns) {
    const th = document.createElement("th");
    th.textContent = c;
    head.appendChild(th);
  }
  const body = table.createTBody();
  const uidAt = columns.indexOf("uid");
  for (const row of rows) {
    const tr = body.insertRow();
    const link = rowLink(columns, row);
    row.forEach((v, i) => {
      const td = tr.insertCell();
      if (link && i === uidAt) {
        const a = document.createElement("a");
        a.href = link.href;
        a.className = link.cls;
        a.textContent = cellText(v);
        td.appendChild(a);
      } else {
        td.textContent = cellText(v);
      }
    });
  }
}

// Every POST carries JSON and the page token of this server (its <meta name="ddai-token">): the
// server refuses any other, so a page of another site cannot make the explorer do anything.
function postJson(url, body) {
  const meta = document.querySelector('meta[name="ddai-token"]');
  return fetch(url, {
    method: "POST",
    headers: {"Content-Type": "application/json", "X-DDAI-Token": meta ? meta.content : ""},
    body: JSON.stringify(body),
  });
}

// The query goes into the URL (?q=), so a result can be shared and survives a reload.
function keepInUrl(sql) {
  const url = new URL(location.href);
  url.searchParams.set("q", sql);
  history.replaceState(null, "", url);
}

async function runSql(event) {
  if (event) event.preventDefault();
  const status = document.getElementById("sql-status");
  const table = document.getElementById("sql-result");
  const sql = document.getElementById("sql").value;
  keepInUrl(sql);
  status.textContent = "running…";
  const res = await postJson("/api/sql", {sql});
  const data = await res.json().catch(() => ({error: res.statusText}));
  if (!res.ok) {
    status.textContent = `error ${res.status}: ${data.error}`;
    status.className = "error";
    table.replaceChildren();
    return;
  }
  status.className = "";
  status.textContent = `${data.rows.length} row(s)${data.truncated ? " (cut)" : ""}`;
  renderTable(table, data.columns, data.rows);
}

async function exportSql(event) {
  const fmt = event.target.dataset.fmt;
  const status = document.getElementById("sql-status");
  const sql = document.getElementById("sql").value;
  keepInUrl(sql);
  status.textContent = `exporting as ${fmt}…`;
  const res = await postJson(`/api/sql/export.${fmt}`, {sql});
  if (!res.ok) {
    const data = await res.json().catch(() => ({error: res.statusText}));
    status.textContent = `error ${res.status}: ${data.error}`;
    status.className = "error";
    return;
  }
  const blob = await res.blob();
  const a = document.createElement("a");
  a.href = URL.createObjectURL(blob);
  a.download = `query.${fmt}`;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10000);
  const n = Number(res.headers.get("X-DDAI-Rows"));
  const cut = res.headers.get("X-DDAI-Truncated") === "1";
  status.className = "";
  status.textContent = `exported ${n.toLocaleString()} row(s) as ${fmt}${cut ? " (cut at the export limit)" : ""}`;
}

function drawOutcomes() {
  const el = document.getElementById("outcome-chart");
  if (!el || !window.Plotly) return;
  const byRun = JSON.parse(el.dataset.outcomes);
  const runs = Object.keys(byRun);
  const outcomes = ["success", "failure", "format_fail", "unjudged"];
  const colours = {success: "#2a9d4a", failure: "#d1495b", format_fail: "#edae49", unjudged: "#999"};
  const traces = outcomes.map(o => {
    const totals = runs.map(r => Object.values(byRun[r]).reduce((a, b) => a + b, 0));
    return {
      type: "bar", orientation: "h", name: o, y: runs, marker: {color: colours[o]},
      x: runs.map((r, i) => totals[i] ? (byRun[r][o] || 0) / totals[i] : 0),
      hovertemplate: "%{y}: %{x:.1%} " + o + "<extra></extra>",
    };
  });
  window.Plotly.newPlot(el, traces, {
    barmode: "stack", height: 80 + 30 * runs.length, margin: {l: 120, r: 20, t: 10, b: 30},
    xaxis: {tickformat: ".0%", range: [0, 1]}, legend: {orientation: "h"},
  }, {displayModeBar: false, responsive: true});
}

document.addEventListener("DOMContentLoaded", () => {
  const form = document.getElementById("sql-form");
  if (form) {
    form.addEventListener("submit", runSql);
    for (const b of form.querySelectorAll("button[data-fmt]")) b.addEventListener("click", exportSql);
    if (form.dataset.autorun) runSql(null);
  }
  drawOutcomes();
});

// ---- images: a placeholder for a page the server has no image of, zoom on click, the <bbox>
function missingImage(img) {
  if (!img.isConnected || img.dataset.missing) return;
  img.dataset.missing = "1";
  const box = document.createElement("div");
  box.className = "img-missing";
  box.textContent = `no image of page ${img.dataset.page || img.alt} on this server`;
  box.title = "start ddai serve with --image-root or --corpus holding this page";
  const frame = img.closest(".frame");
  (frame || img).replaceWith(box);
}

function placeBox(fig) {
  const img = fig.querySelector("img");
  const box = fig.querySelector(".bbox-box");
  if (!img || !box || !img.naturalWidth) return;
  const [x1, y1, x2, y2] = fig.dataset.bbox.split(",").map(Number);
  const w = img.naturalWidth, h = img.naturalHeight;
  const clamp = v => Math.min(Math.max(v, 0), 1);
  box.style.left = `${100 * clamp(x1 / w)}%`;
  box.style.top = `${100 * clamp(y1 / h)}%`;
  box.style.width = `${100 * (clamp(x2 / w) - clamp(x1 / w))}%`;
  box.style.height = `${100 * (clamp(y2 / h) - clamp(y1 / h))}%`;
  box.hidden = false;
}

function setupImages() {
  document.addEventListener("error", e => {
    if (e.target instanceof HTMLImageElement) missingImage(e.target);
  }, true);
  for (const img of document.querySelectorAll("img")) {
    if (img.complete && img.naturalWidth === 0 && img.getAttribute("src")) missingImage(img);
  }
  for (const fig of document.querySelectorAll("figure.boxed")) {
    const img = fig.querySelector("img");
    if (img.complete) placeBox(fig);
    else img.addEventListener("load", () => placeBox(fig));
  }
  // zoom: the first click on a page image makes the overlay (no empty image in the page before)
  document.addEventListener("click", e => {
    const img = e.target.closest ? e.target.closest("img[data-page]") : null;
    let zoom = document.getElementById("zoom");
    if (img) {
      if (!zoom) {
        zoom = document.createElement("div");
        zoom.id = "zoom";
        zoom.className = "overlay zoom";
        const big = document.createElement("img");
        big.id = "zoom-img";
        big.alt = "zoomed page";
        zoom.appendChild(big);
        document.body.appendChild(zoom);
      }
      document.getElementById("zoom-img").src = img.src;
      zoom.hidden = false;
    } else if (zoom && e.target.closest && e.target.closest("#zoom")) {
      zoom.hidden = true;
    }
  });
}

// ---- keyboard: j/k rows or turns, n/p pages or rollouts, ? help, r raw text
function setupKeys() {
  const help = document.getElementById("keys-help");
  if (!help) return;
  const rows = Array.from(document.querySelectorAll("#rollouts tbody tr"));
  const turns = Array.from(document.querySelectorAll("ol.turns > li.turn"));
  const onTable = document.getElementById("rollouts") !== null;
  const items = onTable ? rows : turns;
  let at = -1;
  const select = i => {
    if (!items.length) return;
    at = Math.max(0, Math.min(items.length - 1, i));
    items.forEach((el, k) => el.classList.toggle("selected", k === at));
    items[at].scrollIntoView({block: "nearest"});
  };
  const go = id => { const a = document.getElementById(id); if (a) location.href = a.href; };
  for (const a of document.querySelectorAll(".keys-hint")) {
    a.addEventListener("click", e => { e.preventDefault(); help.hidden = !help.hidden; });
  }
  document.addEventListener("keydown", e => {
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    const t = e.target;
    // keys type text in a text box; a checkbox or button with focus leaves them to the page
    const typing = t instanceof HTMLInputElement &&
      !["checkbox", "radio", "button", "submit"].includes(t.type);
    if (typing || t instanceof HTMLTextAreaElement || t instanceof HTMLSelectElement) return;
    const zoom = document.getElementById("zoom");
    if (e.key === "Escape") { help.hidden = true; if (zoom) zoom.hidden = true; return; }
    if (e.key === "?") { help.hidden = !help.hidden; return; }
    if (e.key === "j") select(at + 1);
    else if (e.key === "k") select(at - 1);
    else if ((e.key === "Enter" || e.key === "o") && onTable && at >= 0) {
      location.href = rows[at].dataset.href;
    } else if (e.key === "n") go(onTable ? "next" : "next-rollout");
    else if (e.key === "p") go(onTable ? "prev" : "prev-rollout");
    else if (e.key === "r") {
      const box = document.getElementById("raw-toggle");
      if (box) { box.checked = !box.checked; box.dispatchEvent(new Event("change")); }
    } else return;
    e.preventDefault();
  });
}

// ---- the raw text of each turn, on or off (kept across rollouts)
function setupRaw() {
  const box = document.getElementById("raw-toggle");
  if (!box) return;
  const apply = () => {
    document.body.classList.toggle("show-raw", box.checked);
    try { sessionStorage.setItem("ddai-raw", box.checked ? "1" : ""); } catch (_) { /* private */ }
  };
  try { box.checked = sessionStorage.getItem("ddai-raw") === "1"; } catch (_) { /* private */ }
  box.addEventListener("change", apply);
  apply();
}

// ---- the run filter: a searchable list of checkboxes
function setupRunSearch() {
  const input = document.getElementById("run-search");
  if (!input) return;
  input.addEventListener("input", () => {
    const q = input.value.trim().toLowerCase();
    for (const label of document.querySelectorAll("#run-picker .run-option")) {
      label.hidden = q !== "" && !label.textContent.toLowerCase().includes(q);
    }
  });
  const size = document.getElementById("f-size");
  if (size) size.addEventListener("change", () => size.form.submit());
}

document.addEventListener("DOMContentLoaded", () => {
  setupImages();
  setupKeys();
  setupRaw();
  setupRunSearch();
});

// ---- live tail: poll the store's version, redraw steps, reward curve and newest groups
function num(v, digits) {
  return v === null || v === undefined ? "—" : Number(v).toFixed(digits);
}

function drawLive(el, data) {
  const steps = data.steps.filter(s => s.step !== null);
  const last = steps.length ? steps[steps.length - 1].step : null;
  document.getElementById("live-steps").textContent =
    `${steps.length.toLocaleString()} step${steps.length === 1 ? "" : "s"}`;
  document.getElementById("live-rollouts").textContent =
    `${data.rollouts.toLocaleString()} rollouts`;
  document.getElementById("live-last-step").textContent = last === null ? "none" : String(last);
  const chart = document.getElementById("live-chart");
  if (window.Plotly && steps.length) {
    const x = steps.map(s => s.step);
    window.Plotly.react(chart, [
      {type: "scatter", mode: "lines+markers", name: "mean reward", x, y: steps.map(s => s.mean_reward)},
      {type: "scatter", mode: "lines+markers", name: "success rate", x, y: steps.map(s => s.success_rate)},
    ], {
      height: 320, margin: {l: 50, r: 20, t: 10, b: 60},
      // whole steps only: a tick every step up to ten steps, then every tenth of the span
      xaxis: {title: {text: "step"}, tickformat: "d",
              dtick: Math.max(1, Math.ceil((x[x.length - 1] - x[0]) / 10))},
      yaxis: {title: {text: "per step"}},
      legend: {orientation: "h", y: -0.3},
    }, {displayModeBar: false, responsive: true});
  } else if (!steps.length) {
    const source = data.step_source || {};
    chart.textContent = source.can_carry_steps === false
      // a flash log never records a step: "yet" would promise a curve that cannot come
      ? `This run's log format (${source.stepless_formats.join(", ")}) records no training steps: ` +
        "there is no curve over steps to draw."
      : "No training steps in this run yet: the curve appears with its first step.";
  }
  const body = document.querySelector("#live-groups tbody");
  body.replaceChildren();
  for (const g of data.groups) {
    const tr = body.insertRow();
    tr.insertCell().textContent = g.step === null ? "no step" : String(g.step);
    const a = document.createElement("a");
    a.href = `/group?uid=${encodeURIComponent(g.uid)}&run=${encodeURIComponent(data.run)}`;
    a.textContent = g.uid;
    tr.insertCell().appendChild(a);
    tr.insertCell().textContent = String(g.n);
    tr.insertCell().textContent = String(g.successes);
    tr.insertCell().textContent = num(g.mean_reward, 3);
    tr.insertCell().textContent = `${num(g.min_reward, 3)} – ${num(g.max_reward, 3)}`;
  }
}

function setupLive() {
  const el = document.getElementById("live");
  if (!el || !el.dataset.run) return;
  const status = document.getElementById("live-status");
  const wait = Number(el.dataset.pollMs) || 1500;
  let version = "";
  const poll = async () => {
    try {
      const q = new URLSearchParams({run: el.dataset.run, since: version});
      const res = await fetch(`/api/live?${q}`, {cache: "no-store"});
      const data = await res.json();
      if (!res.ok) throw new Error(data.error || res.statusText);
      if (!data.same) {
        version = data.version;
        el.dataset.version = version;
        drawLive(el, data);
      }
      status.textContent = `live · store version ${version} · checked ${new Date().toLocaleTimeString()}`;
      status.className = "live-status";
    } catch (err) {
      status.textContent = `not updating: ${err.message}`;
      status.className = "live-status error";
    }
    setTimeout(poll, wait);
  };
  poll();
}

document.addEventListener("DOMContentLoaded", setupLive);
