// The explorer's writing pages: labels (/annotate) and the ground-truth review queue (/review).
// Every write is a JSON POST carrying the page token (see reports/serve/guard.py).
"use strict";

function ddaiToken() {
  const meta = document.querySelector('meta[name="ddai-token"]');
  return meta ? meta.content : "";
}

async function ddaiPost(url, body) {
  const r = await fetch(url, {
    method: "POST",
    headers: {"Content-Type": "application/json", "X-DDAI-Token": ddaiToken()},
    body: JSON.stringify(body),
  });
  let data = {};
  try { data = await r.json(); } catch (e) { data = {error: r.status + " " + r.statusText}; }
  if (!r.ok) throw new Error(data.error || ("HTTP " + r.status));
  return data;
}

function setupAnnotate(form) {
  const status = document.getElementById("annotate-status");
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const d = form.dataset;
    const target = (form.querySelector('input[name="target"]:checked') || {}).value || "prompt";
    const body = {run_id: d.run, uid: d.uid, step: d.step === "" ? null : Number(d.step)};
    if (target !== "prompt") body.rollout_idx = Number(d.idx);
    if (target === "turn") body.turn = Number(form.querySelector('select[name="turn"]').value);
    body.label = (form.querySelector('input[name="label"]:checked') || {}).value || null;
    body.note = form.querySelector('textarea[name="note"]').value;
    status.textContent = "saving…";
    try {
      await ddaiPost("/api/annotations", body);
      location.reload();
    } catch (e) {
      status.textContent = e.message;
      status.className = "error";
    }
  });
  document.querySelectorAll("button.retract").forEach((b) => b.addEventListener("click", async () => {
    try {
      await ddaiPost("/api/annotations", {run_id: form.dataset.run, uid: form.dataset.uid,
                                          retracts: b.dataset.id, rollout_idx: null});
      location.reload();
    } catch (e) {
      status.textContent = e.message;
      status.className = "error";
    }
  }));
}

function setupReview(box) {
  const status = document.getElementById("review-status");
  const reason = document.querySelector('#review-form input[name="reason"]');
  // The bare /review shows the first undecided prompt: name it in the URL, so a reload or a
  // shared link shows this prompt, not whichever is first undecided by then.
  const here = new URL(location.href);
  if (here.searchParams.get("uid") !== box.dataset.uid) {
    here.searchParams.set("uid", box.dataset.uid);
    history.replaceState(null, "", here);
  }
  let busy = false;
  async function decide(verdict) {
    if (busy || box.dataset.annotate !== "1") return;
    busy = true;
    status.textContent = "saving " + verdict + "…";
    try {
      // seen: the decision this page shows, so one made elsewhere since is not replaced unseen
      const res = await ddaiPost("/api/review", {uid: box.dataset.uid, verdict: verdict,
                                                 reason: reason.value, seen: box.dataset.seen});
      location.assign(res.next === null ? "/review" : "/review?uid=" + encodeURIComponent(res.next));
    } catch (e) {
      status.textContent = e.message;
      status.className = "error";
      busy = false;
    }
  }
  document.querySelectorAll("#review-form button.verdict").forEach(
    (b) => b.addEventListener("click", () => decide(b.dataset.verdict)));
  const keys = {o: "ok", w: "wrong", u: "uncertain"};
  document.addEventListener("keydown", (ev) => {
    if (ev.target.closest && ev.target.closest("input, textarea, select")) return;
    if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
    if (keys[ev.key]) { ev.preventDefault(); decide(keys[ev.key]); return; }
    const go = (ev.key === "n" || ev.key === "j") ? box.dataset.next
      : (ev.key === "p" || ev.key === "k") ? box.dataset.prev : undefined;
    if (go) { ev.preventDefault(); location.assign("/review?uid=" + encodeURIComponent(go)); }
  });
}

document.addEventListener("DOMContentLoaded", () => {
  const form = document.getElementById("annotate");
  if (form) setupAnnotate(form);
  const box = document.getElementById("review");
  if (box) setupReview(box);
});
