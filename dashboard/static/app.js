// sessionstream dashboard: vanilla JS over /api/sessions, /api/sessions/{id} and /api/events;
// the plots (plots.js) over /api/sessions/{id}/series and /api/tenant/series.
// Every value from the server is inserted as text (never as HTML).
"use strict";

const CLIP = 240; // characters of message content shown before "more"
const state = { sessions: [], selected: null, detail: null, seen: new Map(), generation: null };

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const $ = (sel) => document.querySelector(sel);
const badge = (text, cls) => h("span", { class: `badge ${cls || text || ""}` }, text ?? "–");
const short = (id, n = 8) => (id && id.length > n + 3 ? id.slice(0, n) + "…" : id ?? "–");
const seqs = (xs) => (!xs || !xs.length ? "–" : xs.length > 4
  ? `${xs[0]}…${xs[xs.length - 1]} (${xs.length})` : xs.join(", "));
const num = (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString());

function ago(ms) {
  if (!ms) return "–";
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.round(s / 60)}m ago`;
  if (s < 86400) return `${Math.round(s / 3600)}h ago`;
  return new Date(ms).toISOString().slice(0, 10);
}

function showError(msg) {
  const el = $("#error");
  el.textContent = msg || "";
  el.classList.toggle("hidden", !msg);
}

async function getJSON(url) {
  const resp = await fetch(url, { cache: "no-store" });
  let body = null;
  try { body = await resp.json(); } catch (_) { /* not JSON */ }
  if (!resp.ok) {
    const err = new Error((body && body.error) || `${resp.status} ${resp.statusText}`);
    err.status = resp.status;
    throw err;
  }
  return body;
}

// ---------- session list ----------

async function loadSessions() {
  try {
    const data = await getJSON("/api/sessions");
    state.sessions = data.sessions;
    setGeneration(data.generation, data.tenant);
    for (const s of data.sessions) state.seen.set(s.session_id, s.as_of_seq);
    renderSessions();
    showError(null);
  } catch (e) { showError(`session list: ${e.message}`); }
}

function renderSessions(flash = new Set()) {
  const q = $("#filter").value.trim().toLowerCase();
  const rows = state.sessions.filter((s) => !q || s.session_id.toLowerCase().includes(q)
    || (s.status || "").includes(q));
  $("#count").textContent = `${rows.length}${q ? ` of ${state.sessions.length}` : ""}`;
  $("#list-empty").classList.toggle("hidden", state.sessions.length > 0);
  const body = $("#sessions tbody");
  body.replaceChildren(...rows.map((s) => h("tr", {
      class: [s.session_id === state.selected ? "selected" : "", flash.has(s.session_id) ? "flash" : ""].join(" "),
      onclick: () => select(s.session_id),
      title: s.quarantine ? `quarantined: ${s.quarantine.reason}` : s.session_id,
    },
    h("td", { class: "mono" }, s.session_id),
    h("td", {}, badge(s.status), s.quarantine ? " ⚠" : ""),
    h("td", { class: "num" }, s.as_of_seq),
    h("td", { class: "num" }, s.turns ?? 0),
    h("td", { class: "mono" }, s.open_turn ? badge(short(s.open_turn), "open") : ""),
    h("td", { class: "num" }, s.rejections ? badge(String(s.rejections), "bad") : "0"),
    h("td", { class: "muted" }, ago(s.last_time)),
  )));
}

function setGeneration(gen, tenant) {
  state.generation = gen;
  $("#generation").textContent = `generation ${gen}`;
  if (tenant) $("#tenant").textContent = `tenant ${tenant}`;
}

// ---------- session detail ----------

function select(id) {
  state.selected = id;
  history.replaceState(null, "", `#s=${encodeURIComponent(id)}`);
  window.fleetPlots?.show(false);
  renderSessions();
  loadDetail();
}

// The tenant's plots, in the detail pane while no session is selected.
function showFleet() {
  state.selected = null;
  state.detail = null;
  history.replaceState(null, "", "#fleet");
  $("#detail").replaceChildren();
  $("#detail-empty").classList.add("hidden");
  renderSessions();
  window.fleetPlots?.show(true);
}

async function loadDetail() {
  const id = state.selected;
  if (!id) return;
  try {
    const snap = await getJSON(`/api/sessions/${encodeURIComponent(id)}`);
    if (id !== state.selected) return;
    // After the views (a concurrent Kafka read would slow their response), while they render.
    window.sessionTimeline?.prefetch(id);
    state.detail = snap;
    renderDetail(snap);
    showError(null);
  } catch (e) {
    if (id !== state.selected) return;
    $("#detail-empty").classList.add("hidden");
    $("#detail").replaceChildren(h("div", { class: "banner warn" },
      h("strong", {}, e.status === 404 ? "Unknown session" : "Could not load the session"), e.message));
  }
}

const TABLE_ROWS = 200; // a long table shows its last rows first (layout of thousands is slow)

// rows: arrays of cells, or items turned into cells by toCells (then only the rows shown
// are built: a 10k-event session has thousands of surface messages).
function table(headers, rows, empty = "none", toCells = null) {
  if (!rows.length) return h("p", { class: "muted" }, empty);
  const tr = (item) => h("tr", {}, (toCells ? toCells(item) : item).map((c, i) => h("td", { class: headers[i].startsWith("#") ? "num" : "" }, c)));
  const shown = rows.length > TABLE_ROWS ? rows.slice(-TABLE_ROWS) : rows;
  const tbody = h("tbody", {}, shown.map(tr));
  const el = h("table", {}, h("thead", {}, h("tr", {}, headers.map((x) =>
    h("th", { class: x.startsWith("#") ? "num" : "" }, x.replace(/^#/, ""))))), tbody);
  if (shown === rows) return el;
  const more = h("button", { class: "more-rows", type: "button" }, `show all ${rows.length} rows (${rows.length - shown.length} earlier)`);
  more.addEventListener("click", () => { tbody.replaceChildren(...rows.map(tr)); more.remove(); }, { once: true });
  return h("div", {}, more, el);
}

function clipped(text) {
  const s = typeof text === "string" ? text : JSON.stringify(text);
  if (!s || s.length <= CLIP) return h("div", { class: "content" }, s || "");
  const el = h("div", { class: "content clip", title: "click to show all" },
    s.slice(0, CLIP), h("span", { class: "more" }, ` … (+${s.length - CLIP} chars)`));
  el.addEventListener("click", () => { el.replaceChildren(s); el.classList.remove("clip"); }, { once: true });
  return el;
}

function kv(obj) {
  const entries = Object.entries(obj || {}).filter(([, v]) => v !== null && v !== undefined
    && !(Array.isArray(v) && !v.length) && !(typeof v === "object" && !Array.isArray(v) && !Object.keys(v).length));
  if (!entries.length) return h("p", { class: "muted" }, "nothing recorded");
  return h("dl", { class: "kv" }, entries.map(([k, v]) => [h("dt", {}, k),
    h("dd", {}, typeof v === "object" ? h("code", {}, JSON.stringify(v)) : String(v))]));
}

function renderDetail(snap) {
  performance.mark("detail-start");
  const v = snap.views || {};
  const idx = v.index || {};
  const parts = [];
  parts.push(h("div", { class: "title" }, h("h2", { class: "mono" }, snap.session_id),
    badge(idx.status), idx.status_reason && idx.status !== "quarantined" ? h("span", { class: "muted" }, idx.status_reason) : null));
  parts.push(h("div", { class: "facts" },
    h("span", {}, "as_of_seq ", h("b", {}, snap.as_of_seq)),
    h("span", {}, "generation ", h("b", {}, snap.generation)),
    h("span", {}, "events ", h("b", {}, num(idx.event_count))),
    h("span", {}, "partition ", h("b", {}, snap.meta?.partition ?? "–"), " offset ", h("b", {}, snap.as_of_offset)),
    h("span", {}, "last ", h("b", {}, idx.last_type || "–"), " ", ago(idx.last_time)),
    idx.lineage ? h("span", {}, "lineage ", h("code", {}, JSON.stringify(idx.lineage))) : null));

  if (snap.quarantine) {
    const q = snap.quarantine;
    parts.push(h("div", { class: "banner bad" }, h("strong", {}, `Quarantined at seq ${q.seq}${q.kind ? ` (${q.kind})` : ""}`),
      h("div", { class: "content" }, q.reason),
      h("div", { class: "muted" }, "Later events of this session are held; other sessions go on.")));
  }
  const rc = snap.reconstructability;
  if (rc && rc.shredded && rc.shredded.length) {
    parts.push(h("div", { class: rc.fully_reconstructable ? "banner warn" : "banner bad" },
      h("strong", {}, rc.fully_reconstructable
        ? "Some content was deleted; every model request is still reconstructable"
        : "Content deleted: model requests of this session are no longer fully reconstructable"),
      table(["class", "deleted", "by", "why"], rc.shredded.map((s) => [
        badge(s.data_class, "bad"), ago(s.at), h("code", {}, s.principal), s.reason])),
      h("div", { class: "muted" }, "The log keeps order, ids, pairing and the audit event; deleted content reads as placeholders. `sessionstream diagnose` lists the sources.")));
  }
  const rej = v.rejections;
  // What each admission verdict means (sessionstream.core.admission.MEANING).
  const VERDICTS = {
    stale_epoch: "a writer whose lease epoch was superseded (zombie writer)",
    seq_gap: "seqs are missing before it (a write went missing)",
    seq_conflict: "its seq is taken by another admitted event",
    history_conflict: "continues a history that was not admitted (a writer that lost a race kept writing)",
  };
  if (rej && rej.total) {
    parts.push(h("div", { class: "banner warn" },
      h("strong", {}, `${rej.total} rejected event${rej.total > 1 ? "s" : ""}: `,
        Object.entries(rej.by_verdict || {}).map(([k, n]) => `${k} ×${n}`).join(", ")),
      table(["#seq", "verdict", "type", "writer", "reason", "#expected"],
        (rej.recent || []).slice().reverse().map((r) => [r.seq, h("span", { title: VERDICTS[r.verdict] || "" }, badge(r.verdict, "bad")), h("code", {}, r.type || "–"),
          h("code", {}, `${short(r.writer?.id, 12)} e${r.writer?.epoch}`), r.reason, r.next_seq ?? "–"]))));
  }

  parts.push(h("div", { id: "plots-box", class: "plots" }));

  const turns = v.turns || {};
  parts.push(h("h3", {}, `Turns (${turns.total ?? 0})`),
    turns.open_turn ? h("p", {}, badge("open", "open"), " turn ", h("code", {}, turns.open_turn),
      turns.open_step ? [" step ", h("code", {}, turns.open_step)] : "") : null,
    table(["turn", "status", "#seqs", "#steps", "detail"], turns.turns || [], "none", (t) =>
      [h("code", { title: t.turn_id }, short(t.turn_id)), badge(t.status),
        `${t.start_seq}…${t.end_seq ?? ""}`, t.steps, t.detail ? JSON.stringify(t.detail) : ""]));

  const tools = v.tools || {};
  const results = Object.values(tools.results || {});
  parts.push(h("h3", {}, `Tools (${results.length} result${results.length === 1 ? "" : "s"}${tools.open?.length ? `, ${tools.open.length} open` : ""})`));
  if (tools.open?.length || tools.declared?.length) {
    parts.push(table(["call", "tool", "state", "#declared", "#call seq", "idempotency key"],
      [...(tools.open || []).map((c) => [h("code", {}, c.call_id), c.name, badge("executing", "open"), c.declared_seq ?? "–", c.call_seq ?? "–", c.idempotency_key || ""]),
        ...(tools.declared || []).map((c) => [h("code", {}, c.call_id), c.name, badge("declared", "open"), c.declared_seq ?? "–", "–", c.idempotency_key || ""])]));
  }
  parts.push(table(["call", "tool", "status", "#call → result", "operation id"], results.map((r) =>
    [h("code", {}, r.call_id), r.name, badge(r.status), `${r.call_seq ?? "–"} → ${r.result_seq}`, h("code", {}, r.operation_id || "")]),
    "no tool results"));
  if (tools.abandoned?.length) {
    parts.push(h("p", { class: "muted" }, "Abandoned (no result was ever invented):"),
      table(["call", "tool", "stage", "reason", "#turn end"], tools.abandoned.map((a) =>
        [h("code", {}, a.call_id), a.name, badge(a.stage, "abandoned"), a.reason, a.turn_end_seq])));
  }

  const surface = v.surface || {};
  parts.push(h("h3", {}, `Surface (${surface.count ?? 0} messages, ~${num(surface.token_estimate)} tokens)`),
    table(["#", "role", "kind", "seqs", "content"], (surface.messages || []).map((m, i) => [i, m]), "empty surface", ([i, m]) => [i,
      m.role, badge(m.kind, m.kind === "summary" ? "warn" : ""), h("code", {}, seqs(m.seqs)),
      h("div", {}, clipped(m.content),
        m.tool_calls?.length ? h("div", { class: "muted" }, "calls: ", m.tool_calls.map((c) => `${c.name} (${c.call_id})`).join(", ")) : null,
        m.call_id ? h("div", { class: "muted" }, `result of ${m.call_id}`, m.status ? ` — ${m.status}` : "") : null)]));

  const usage = v.usage || {};
  const todo = v.todo || {}, plan = v.plan || {}, goal = v.goal || {};
  parts.push(h("div", { class: "grid2" },
    h("div", {}, h("h3", {}, "Usage"),
      table(["provider / model", "#requests", "#input", "#output"], [
        ...(usage.by_model || []).map((u) => [`${u.provider} / ${u.model}`, u.requests, num(u.input_tokens), num(u.output_tokens)]),
        ...(usage.total ? [[h("b", {}, "total"), usage.total.requests, num(usage.total.input_tokens), num(usage.total.output_tokens)]] : [])])),
    h("div", {}, h("h3", {}, "Goal"), goal.goal ? h("p", {}, clipped(goal.goal), h("span", { class: "muted" }, `seq ${goal.seq}, ${goal.changes} change(s)`)) : h("p", { class: "muted" }, "no goal"),
      h("h3", {}, `Plan${plan.revisions ? ` (revision ${plan.revisions}, seq ${plan.seq})` : ""}`),
      plan.steps?.length ? h("ol", { class: "plain" }, plan.steps.map((s) => h("li", {}, typeof s === "string" ? s : JSON.stringify(s)))) : h("p", { class: "muted" }, "no plan"))));
  parts.push(h("h3", {}, `Todo (${(todo.items || []).length})`),
    table(["id", "status", "text", "#added", "#updated"], (todo.items || []).map((t) =>
      [h("code", {}, t.id), badge(t.status, t.status === "done" ? "ok" : "open"), clipped(t.text), t.added_seq, t.updated_seq])),
    todo.unknown_updates ? h("p", { class: "muted" }, `${todo.unknown_updates} update(s) named an unknown item`) : null);

  parts.push(h("h3", {}, "Business state"), kv(v.business));

  const comp = v.compaction || {};
  parts.push(h("h3", {}, `Compaction history (${(comp.attempts || []).length})`),
    comp.open ? h("div", { class: "banner warn" }, h("strong", {}, "Compaction in progress"), h("code", {}, JSON.stringify(comp.open))) : null,
    table(["id", "trigger", "outcome", "shadowed seqs", "#tokens before → after", "summarizer", "#start…end"],
      (comp.attempts || []).slice().reverse().map((a) => [h("code", {}, a.compaction_id), a.trigger,
        h("span", {}, badge(a.outcome || "open", a.outcome || "open"), a.reason ? ` ${a.reason}` : ""),
        a.shadowed_seqs?.length ? h("a", { href: "#", class: "evidence-link", title: "show this attempt's events and the shadowed seqs in the event timeline",
          onclick: (e) => { e.preventDefault(); window.sessionTimeline?.showEvidence(a); } }, h("code", {}, seqs(a.shadowed_seqs))) : h("code", {}, "–"),
        a.tokens_before != null ? `${num(a.tokens_before)} → ${num(a.tokens_after)}` : "–",
        a.summarizer ? `${a.summarizer.provider}/${a.summarizer.model}` : "–",
        `${a.start_seq}…${a.end_seq ?? ""}`]), "no compactions"));

  const known = new Set(["index", "turns", "tools", "surface", "usage", "todo", "plan", "goal", "business", "compaction", "rejections"]);
  for (const [k, val] of Object.entries(v)) {
    if (!known.has(k)) parts.push(h("h3", {}, k), h("pre", { class: "mono" }, JSON.stringify(val, null, 2)));
  }
  parts.push(h("div", { id: "timeline-box" }));
  const raw = h("details", { class: "raw" }, h("summary", {}, "raw views (JSON)"));
  raw.addEventListener("toggle", () => {
    if (raw.open && raw.childElementCount === 1) raw.append(h("pre", {}, JSON.stringify(snap, null, 2)));
  });
  parts.push(raw);

  $("#detail-empty").classList.add("hidden");
  const pane = $("#detail-pane"), top = pane.scrollTop;
  $("#detail").replaceChildren(...parts.filter(Boolean));
  window.sessionPlots?.load(snap.session_id);
  window.sessionTimeline?.load(snap.session_id);
  pane.scrollTop = top;
  performance.measure("detail-render", "detail-start");
}

// ---------- live updates ----------

let listTimer = null, detailTimer = null;
const pendingFlash = new Set();

function scheduleList() {
  if (listTimer) return;
  listTimer = setTimeout(async () => {
    listTimer = null;
    const flash = new Set(pendingFlash);
    pendingFlash.clear();
    await loadSessions();
    renderSessions(flash);
  }, 300);
}

function scheduleDetail() {
  if (detailTimer) return;
  detailTimer = setTimeout(() => { detailTimer = null; loadDetail(); }, 300);
}

function connect() {
  const live = $("#live");
  const es = new EventSource("/api/events");
  const on = (text) => { live.textContent = text; live.className = "live on"; };
  es.addEventListener("hello", (e) => { on("live"); setGeneration(JSON.parse(e.data).generation); scheduleList(); scheduleDetail(); });
  es.addEventListener("reset", (e) => {
    const d = JSON.parse(e.data);
    on("live");
    state.seen.clear();
    setGeneration(d.generation);
    scheduleList(); scheduleDetail();
  });
  es.addEventListener("change", (e) => {
    const c = JSON.parse(e.data);
    const prev = state.seen.get(c.session);
    if (prev !== undefined && c.as_of_seq <= prev) return; // a repeated feed entry
    state.seen.set(c.session, c.as_of_seq);
    pendingFlash.add(c.session);
    scheduleList();
    window.fleetPlots?.refresh();
    if (c.session === state.selected) scheduleDetail();
  });
  es.addEventListener("unavailable", (e) => { showError(JSON.parse(e.data).error); });
  es.onerror = () => { live.textContent = "reconnecting…"; live.className = "live off"; };
}

$("#filter").addEventListener("input", () => renderSessions());
$("#fleet-link").addEventListener("click", (e) => { e.preventDefault(); showFleet(); });
const fromHash = new URLSearchParams(location.hash.slice(1)).get("s");
if (fromHash) state.selected = fromHash;
loadSessions();
if (state.selected) loadDetail(); else showFleet();
connect();
setInterval(() => renderSessions(), 15000); // keep "last activity" fresh
