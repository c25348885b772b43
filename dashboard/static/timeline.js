// Event timeline of the selected session: /api/sessions/{id}/timeline, one row per record of
// the session's range (admitted or rejected, with the reason). Inserted as text only.
"use strict";

window.sessionTimeline = (() => {
  const MIN_INTERVAL_MS = 2000; // a busy session reloads its timeline at most this often
  const ROWS = 500; // rows asked for first; "show all" asks for up to 20000
  let current = null, lastLoad = 0, timer = null, rows = [], lastBody = null, limit = ROWS, highlighted = null;

  const el = (tag, attrs, ...children) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) e.setAttribute(k, v);
    for (const c of children) if (c !== null && c !== undefined) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return e;
  };
  const short = (id) => (id && id.length > 11 ? id.slice(0, 8) + "…" : id ?? "–");

  function box() { return document.getElementById("timeline-box"); }

  function render(body) {
    rows = body.rows;
    lastBody = body;
    const b = box();
    if (!b) return; // the detail is not drawn yet: load() draws it then
    const head = el("h3", {}, `Event timeline (${body.total} records, offsets ${body.range.start}…${body.range.end - 1} of partition ${body.partition})`);
    let note = null;
    if (body.truncated) {
      const all = el("button", { type: "button", class: "more-rows" }, "show all");
      all.addEventListener("click", () => { limit = 20000; fetchNow(current); }, { once: true });
      note = el("p", { class: "muted" }, `showing the last ${body.rows.length}; ${body.truncated} earlier not shown `, all);
    }
    const tbody = el("tbody", {});
    const frag = document.createDocumentFragment();
    for (const r of body.rows) {
      const tr = el("tr", { id: r.verdict === "admitted" ? `tl-seq-${r.seq}` : null, class: r.verdict === "admitted" ? "" : "rejected", "data-seq": r.seq ?? "" },
        el("td", { class: "num" }, r.seq ?? "–"),
        el("td", {}, el("code", {}, r.type ?? "–")),
        el("td", {}, el("code", { title: r.turn_id || "" }, short(r.turn_id)), " / ", el("code", { title: r.step_id || "" }, short(r.step_id))),
        el("td", {}, el("code", { title: r.writer || "" }, `${short(r.writer)} e${r.epoch ?? "–"}`)),
        el("td", {}, el("span", { class: `badge ${r.verdict === "admitted" ? "ok" : "bad"}` }, r.verdict), r.reason ? ` ${r.reason}` : ""),
        el("td", { class: "num" }, r.offset ?? "–"));
      frag.append(tr);
    }
    tbody.append(frag);
    const table = el("table", { id: "timeline" }, el("thead", {}, el("tr", {},
      el("th", { class: "num" }, "seq"), el("th", {}, "type"), el("th", {}, "turn / step"),
      el("th", {}, "writer epoch"), el("th", {}, "admission"), el("th", { class: "num" }, "offset"))), tbody);
    b.replaceChildren(head, ...(note ? [note] : []), el("div", { class: "timeline-scroll" }, table));
    if (highlighted) mark(highlighted, false); // kept across redraws of a live page
    performance.mark("timeline-rendered");
    b.setAttribute("data-loaded-seq", String(body.rows.length ? body.rows[body.rows.length - 1].seq : -1));
  }

  async function fetchNow(id) {
    lastLoad = Date.now();
    try {
      const resp = await fetch(`/api/sessions/${encodeURIComponent(id)}/timeline?limit=${limit}`, { cache: "no-store" });
      const body = await resp.json();
      if (id !== current) return;
      if (!resp.ok) { lastBody = null; const b = box(); if (b) b.replaceChildren(el("p", { class: "muted" }, `timeline: ${body.error || resp.status}`)); return; }
      render(body);
    } catch (e) {
      const b = box();
      if (b) b.replaceChildren(el("p", { class: "muted" }, `timeline unavailable: ${e.message}`));
    }
  }

  // Start reading a newly selected session's timeline while its views load.
  function prefetch(id) {
    if (id === current) return;
    current = id; rows = []; lastBody = null; limit = ROWS; highlighted = null; clearTimeout(timer); timer = null;
    fetchNow(id);
  }

  function load(id) {
    if (id !== current) { current = id; rows = []; lastBody = null; limit = ROWS; highlighted = null; clearTimeout(timer); timer = null; fetchNow(id); return; }
    if (lastBody && box() && !box().firstChild) render(lastBody); // the detail was redrawn
    if (timer) return;
    const wait = Math.max(0, MIN_INTERVAL_MS - (Date.now() - lastLoad));
    timer = setTimeout(() => { timer = null; fetchNow(id); }, wait);
  }

  // Highlight a compaction attempt's evidence: its lifecycle events and the shadowed seqs.
  function showEvidence(attempt) {
    highlighted = attempt;
    mark(attempt, true);
  }

  function mark(attempt, scroll) {
    document.querySelectorAll("#timeline tr.evidence, #timeline tr.shadowed").forEach((r) => r.classList.remove("evidence", "shadowed"));
    const end = attempt.end_seq ?? attempt.start_seq;
    for (let s = attempt.start_seq; s <= end; s++) document.getElementById(`tl-seq-${s}`)?.classList.add("evidence");
    for (const s of attempt.shadowed_seqs || []) document.getElementById(`tl-seq-${s}`)?.classList.add("shadowed");
    const first = document.getElementById(`tl-seq-${attempt.start_seq}`);
    if (first && scroll) first.scrollIntoView({ block: "center" });
  }

  return { load, prefetch, showEvidence };
})();
