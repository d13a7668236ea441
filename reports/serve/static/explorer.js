// ddai explorer: the SQL box and the sections chart. Every text from the server is set with
// textContent, never as HTML, so query results stay text however they are written.
"use strict";

function cellText(v) {
  if (v === null || v === undefined) return "—";
  if (typeof v === "object") return JSON.stringify(v);
  return String(v);
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
  for (const row of rows) {
    const tr = body.insertRow();
    for (const v of row) tr.insertCell().textContent = cellText(v);
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

async function runSql(event) {
  event.preventDefault();
  const status = document.getElementById("sql-status");
  const table = document.getElementById("sql-result");
  status.textContent = "running…";
  const res = await postJson("/api/sql", {sql: document.getElementById("sql").value});
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
  if (form) form.addEventListener("submit", runSql);
  drawOutcomes();
});
