// Plots of the dashboard, drawn as plain SVG by hand (no library, no build step).
// Session: /api/sessions/{id}/series (context size over seq with compaction drops and the
// budget line; tokens and cost per turn; one turn's waterfall). Tenant:
// /api/tenant/series (sessions active, events/s, rejections and quarantines, the worker's
// lag per partition). The server bounds what is drawn (downsampled points, grouped bars).
// Every value from the server is inserted as text (never as HTML).
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const COLORS = {
  input: "#2f6fde", cached: "#9dbcf2", output: "#e08a1e", reasoning: "#8e5bd6",
  cost: "#1f8a4c", budget: "#c62b2b", drop: "#c62b2b", line: "#2f6fde", grid: "#e6e9ee",
  axis: "#6b7480", ok: "#1f8a4c", error: "#c62b2b", warn: "#d58512", open: "#9aa3ae",
};
const PARTITION_COLORS = ["#2f6fde", "#e08a1e", "#1f8a4c", "#c62b2b", "#8e5bd6", "#0f9ba8",
  "#b35c00", "#6b7480", "#d6409f", "#4c9a2a", "#5a4fcf", "#a0522d"];

function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) el.setAttribute(k, String(v));
  for (const c of children) if (c !== null && c !== undefined) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}
const tip = (text) => s("title", {}, text);

function compact(n) {
  if (n === null || n === undefined) return "–";
  const a = Math.abs(n);
  if (a >= 1e6) return (n / 1e6).toFixed(a >= 1e7 ? 0 : 1) + "M";
  if (a >= 1e3) return (n / 1e3).toFixed(a >= 1e4 ? 0 : 1) + "k";
  return Number.isInteger(n) ? String(n) : n.toFixed(2);
}
function ms(n) {
  if (n === null || n === undefined) return "–";
  if (n >= 60000) return (n / 60000).toFixed(1) + " min";
  if (n >= 1000) return (n / 1000).toFixed(n >= 10000 ? 0 : 1) + " s";
  return Math.round(n) + " ms";
}
const usd = (c) => (c === null || c === undefined ? "–" : c === 0 ? "$0"
  : "$" + (c < 0.01 ? c.toFixed(4) : c.toFixed(2)));
const clock = (t) => new Date(t).toISOString().slice(11, 19);

// "Nice" axis ticks from 0 (or lo) to hi.
function ticks(lo, hi, n = 5) {
  if (hi <= lo) hi = lo + 1;
  const raw = (hi - lo) / n, mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((x) => x >= raw) || raw;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(v);
  return out;
}

// A frame: width, height, margins, x and y scales; returns the svg and helpers.
function frame(w, h, xlo, xhi, ylo, yhi, opts = {}) {
  const m = { l: 52, r: opts.right ? 52 : 14, t: 14, b: 26 };
  const X = (v) => m.l + ((v - xlo) / Math.max(1e-9, xhi - xlo)) * (w - m.l - m.r);
  const Y = (v) => h - m.b - ((v - ylo) / Math.max(1e-9, yhi - ylo)) * (h - m.t - m.b);
  const svg = s("svg", { viewBox: `0 0 ${w} ${h}`, width: "100%", class: "plot", role: "img" });
  for (const v of ticks(ylo, yhi, opts.yTicks || 4)) {
    svg.append(s("line", { x1: m.l, x2: w - m.r, y1: Y(v), y2: Y(v), stroke: COLORS.grid }),
      s("text", { x: m.l - 6, y: Y(v) + 4, "text-anchor": "end", class: "tick" }, (opts.yFormat || compact)(v)));
  }
  const xt = opts.xTicks || ticks(xlo, xhi, 6);
  for (const v of xt) {
    if (v < xlo || v > xhi) continue;
    svg.append(s("text", { x: X(v), y: h - 8, "text-anchor": "middle", class: "tick" }, (opts.xFormat || compact)(v)));
  }
  svg.append(s("line", { x1: m.l, x2: w - m.r, y1: Y(ylo), y2: Y(ylo), stroke: COLORS.axis }));
  return { svg, X, Y, m, w, h };
}

function legend(items) {
  const box = document.createElement("div");
  box.className = "legend";
  for (const [label, color, dash] of items) {
    const sw = document.createElement("span");
    sw.className = "swatch" + (dash ? " dash" : "");
    sw.style.background = dash ? "transparent" : color;
    sw.style.borderColor = color;
    const item = document.createElement("span");
    item.append(sw, document.createTextNode(label));
    box.append(item);
  }
  return box;
}

function block(title, note, ...children) {
  const d = document.createElement("div");
  d.className = "plot-block";
  const h = document.createElement("h4");
  h.textContent = title;
  d.append(h);
  if (note) { const p = document.createElement("p"); p.className = "muted plot-note"; p.textContent = note; d.append(p); }
  d.append(...children.filter(Boolean));
  return d;
}

// ---------- session: context size over seq ----------

function contextPlot(body) {
  const ctx = body.context, pts = ctx.points, budget = body.budget;
  const w = 900, h = 240;
  const last = Math.max(body.last_seq, 1);
  const peak = Math.max(...pts.map((p) => p[1]), budget || 0, 1);
  const f = frame(w, h, 0, last, 0, peak * 1.12, { yTicks: 4 });
  f.svg.id = "plot-context";
  f.svg.setAttribute("data-points", String(pts.length));
  // the size as a step line: it holds between changes, and a replace is a vertical drop
  let d = "";
  let prev = null;
  for (const [seq, tok] of pts) {
    d += prev === null ? `M${f.X(seq)},${f.Y(tok)}` : `H${f.X(seq)}V${f.Y(tok)}`;
    prev = tok;
  }
  if (prev !== null) d += `H${f.X(body.last_seq)}`;
  f.svg.append(s("path", { d, fill: "none", stroke: COLORS.line, "stroke-width": 1.5, class: "context-line" }));
  if (budget) {
    f.svg.append(s("line", { x1: f.m.l, x2: w - f.m.r, y1: f.Y(budget), y2: f.Y(budget), stroke: COLORS.budget, "stroke-dasharray": "6 4", class: "budget-line" }, tip(`budget ${budget.toLocaleString()} tokens`)),
      s("text", { x: w - f.m.r - 4, y: f.Y(budget) - 5, "text-anchor": "end", class: "budget-label" }, `budget ${compact(budget)}`));
  }
  const byId = Object.fromEntries((body.compactions || []).map((c) => [c.compaction_id, c]));
  const labelled = ctx.drops.length <= 16 ? ctx.drops : [...ctx.drops].sort((a, b) => (b.before - b.after) - (a.before - a.after)).slice(0, 16);
  const shown = new Set(labelled.map((d0) => d0.seq));
  ctx.drops.forEach((drop, i) => {
    const x = f.X(drop.seq), c = byId[drop.compaction_id];
    const what = drop.compaction_id ? `compaction ${drop.compaction_id}` : "replace";
    const detail = `${what} at seq ${drop.seq}: ${drop.before.toLocaleString()} → ${drop.after.toLocaleString()} tokens` +
      (c && c.recorded_before !== null ? ` (its summary: ${c.recorded_before} → ${c.recorded_after} for ${c.shadowed} shadowed messages)` : "");
    const g = s("g", { class: "drop", "data-seq": drop.seq }, tip(detail),
      s("line", { x1: x, x2: x, y1: f.Y(drop.before), y2: f.Y(drop.after), stroke: COLORS.drop, "stroke-width": 2.5 }),
      s("circle", { cx: x, cy: f.Y(drop.after), r: 3, fill: COLORS.drop }));
    if (shown.has(drop.seq)) { // above the drop, every other one a line higher
      g.append(s("text", { x: x + 4, y: Math.max(10, f.Y(drop.before) - (i % 2 ? 15 : 4)), class: "drop-label" },
        `${compact(drop.before)} → ${compact(drop.after)}`));
    }
    f.svg.append(g);
  });
  for (const c of body.compactions || []) {
    if (c.drop_seq !== null || !c.outcome || c.outcome === "completed") continue;
    const x = f.X(c.start_seq);
    f.svg.append(s("g", { class: "compaction-miss" }, tip(`compaction ${c.compaction_id} ${c.outcome} at seq ${c.start_seq}`),
      s("path", { d: `M${x - 4},${f.Y(0) - 2}L${x + 4},${f.Y(0) - 2}L${x},${f.Y(0) - 10}Z`, fill: COLORS.warn })));
  }
  const note = `${ctx.tokens.toLocaleString()} tokens now · ${ctx.total_points.toLocaleString()} changes` +
    (ctx.downsampled ? ` (${pts.length} points drawn)` : "") + ` · ${ctx.drops.length} drop${ctx.drops.length === 1 ? "" : "s"}`;
  return block("Context size (tokens of the surface) over seq", note, f.svg,
    legend([["context", COLORS.line], ["compaction: before → after", COLORS.drop], ["budget", COLORS.budget, true]]));
}

// ---------- session: tokens and cost per turn ----------

function turnsPlot(body, selected, onPick) {
  const t = body.turns, bars = t.bars;
  const w = 900, h = 220;
  const tot = (b) => b.input + b.cached + b.output;
  const top = Math.max(1, ...bars.map(tot));
  const costs = bars.map((b) => b.cost).filter((c) => c !== null);
  const priced = t.priced && costs.length === bars.length && bars.length > 0;
  const maxCost = priced ? Math.max(...costs, 1e-9) : 1;
  const f = frame(w, h, 0, Math.max(bars.length, 1), 0, top * 1.1, {
    right: priced, xTicks: ticks(0, Math.max(bars.length, 1), 8).filter(Number.isInteger),
    xFormat: (v) => (bars[v] ? String(bars[v].turn) : v === bars.length ? "" : String(v * t.per_bar)),
  });
  f.svg.id = "plot-turns";
  f.svg.setAttribute("data-bars", String(bars.length));
  const bw = Math.max(1, (f.X(1) - f.X(0)) * 0.8);
  bars.forEach((b, i) => {
    const x = f.X(i) + (f.X(1) - f.X(0)) * 0.1;
    const g = s("g", { class: "turn-bar" + (selected !== null && b.turn <= selected && selected <= (b.last_turn ?? b.turn) ? " selected" : ""), "data-turn": b.turn });
    let y0 = 0;
    for (const [key, v] of [["input", b.input], ["cached", b.cached], ["output", b.output - b.reasoning], ["reasoning", b.reasoning]]) {
      if (v <= 0) continue;
      g.append(s("rect", { x, width: bw, y: f.Y(y0 + v), height: Math.max(0.5, f.Y(y0) - f.Y(y0 + v)), fill: COLORS[key] }));
      y0 += v;
    }
    const status = b.status === "completed" ? null : (b.status === "failed" ? COLORS.error : b.status === "open" ? COLORS.open : COLORS.warn);
    if (status) g.append(s("rect", { x, width: bw, y: f.Y(0) + 2, height: 4, fill: status }));
    const span = b.turns > 1 ? `turns ${b.turn}–${b.last_turn}` : `turn ${b.turn}`;
    g.append(tip(`${span} (${b.turns > 1 ? Object.entries(b.statuses).map(([k, n]) => `${k} ×${n}`).join(", ") : b.status}): ` +
      `input ${b.input.toLocaleString()}, cached ${b.cached.toLocaleString()}, output ${b.output.toLocaleString()} ` +
      `(reasoning ${b.reasoning.toLocaleString()}), ${b.requests} request(s), cost ${usd(b.cost)}, ` +
      `${b.tools} tool call(s)${b.tool_errors ? `, ${b.tool_errors} failed` : ""}, ${ms(b.duration_ms)}`));
    g.append(s("rect", { x: f.X(i), width: f.X(1) - f.X(0), y: f.m.t, height: f.Y(0) - f.m.t, fill: "transparent", class: "hit" }));
    g.addEventListener("click", () => onPick(b.turn));
    f.svg.append(g);
  });
  if (priced) {
    const C = (v) => h - f.m.b - (v / (maxCost * 1.1)) * (h - f.m.t - f.m.b);
    let d = "";
    bars.forEach((b, i) => { d += `${i ? "L" : "M"}${f.X(i + 0.5)},${C(b.cost)}`; });
    f.svg.append(s("path", { d, fill: "none", stroke: COLORS.cost, "stroke-width": 1.5, class: "cost-line" }));
    for (const v of ticks(0, maxCost * 1.1, 4)) {
      f.svg.append(s("text", { x: w - f.m.r + 6, y: C(v) + 4, class: "tick cost-tick" }, usd(v)));
    }
  }
  const tt = t.totals || { input: 0, cached: 0, output: 0, reasoning: 0, cost: null };
  const note = `${t.total} turn${t.total === 1 ? "" : "s"}${t.per_bar > 1 ? ` (${t.per_bar} per bar)` : ""} · input ${compact(tt.input)} · cached ${compact(tt.cached)} · output ${compact(tt.output)} (reasoning ${compact(tt.reasoning)}) · cost ` +
    (tt.cost !== null && t.priced ? usd(tt.cost) : t.priced ? "– (a model has no price)" : "– (no prices: SESSIONSTREAM_PRICES)") + " · click a bar for its waterfall";
  const items = [["input", COLORS.input], ["cached input", COLORS.cached], ["output", COLORS.output], ["reasoning", COLORS.reasoning]];
  if (priced) items.push(["cost", COLORS.cost]);
  return block("Tokens and cost per turn", note, f.svg, legend(items));
}

// ---------- session: one turn's waterfall ----------

const SPAN_COLOR = (st) => ({ ok: COLORS.ok, completed: COLORS.ok, end_turn: COLORS.ok, tool_use: COLORS.ok,
  error: COLORS.error, failed: COLORS.error, abandoned: COLORS.warn, interrupted: COLORS.warn,
  cancelled: COLORS.warn, refused: COLORS.warn, open: COLORS.open }[st] || COLORS.line);
const MAX_ROWS = 60;

function waterfallPlot(body, onPick) {
  const fall = body.waterfall;
  if (!fall) return block("Turn waterfall", "no turn yet");
  const spans = fall.spans.slice(0, MAX_ROWS);
  const rowH = 18, w = 900, labelW = 210;
  const h = 30 + (spans.length + 1) * rowH + 20;
  const dur = Math.max(fall.duration_ms, 1);
  const X = (t) => labelW + (Math.min(t, dur) / dur) * (w - labelW - 20);
  const svg = s("svg", { viewBox: `0 0 ${w} ${h}`, width: "100%", class: "plot", id: "plot-waterfall", "data-turn": fall.turn, "data-spans": String(fall.spans.length) });
  for (const v of ticks(0, dur, 6)) {
    svg.append(s("line", { x1: X(v), x2: X(v), y1: 22, y2: h - 10, stroke: COLORS.grid }),
      s("text", { x: X(v), y: 14, "text-anchor": "middle", class: "tick" }, ms(v)));
  }
  const row = (i, label, start, end, status, detail, indent = 0) => {
    const y = 26 + i * rowH;
    const open = end === null;
    const x2 = X(open ? dur : end), x1 = X(start);
    svg.append(s("g", { class: `span ${status}` }, tip(detail),
      s("text", { x: 6 + indent, y: y + 12, class: "span-label" }, label.length > 30 ? label.slice(0, 29) + "…" : label),
      s("rect", { x: x1, y: y + 2, width: Math.max(2, x2 - x1), height: rowH - 5, rx: 2, fill: SPAN_COLOR(status), opacity: open ? 0.45 : 0.9 })));
  };
  row(0, `turn ${fall.turn}`, 0, fall.duration_ms, fall.status, `turn ${fall.turn} (${fall.turn_id}): ${fall.status}, ${ms(fall.duration_ms)}, seqs ${fall.start_seq}…${fall.end_seq ?? ""}`);
  spans.forEach((sp, i) => {
    const indent = sp.kind === "step" ? 8 : 20;
    const label = sp.kind === "step" ? sp.label : `${sp.kind === "model" ? "model" : "tool"} ${sp.label}`;
    row(i + 1, label, sp.start, sp.end, sp.status,
      `${sp.kind} ${sp.label}: ${sp.status}, ${ms(sp.start)} → ${sp.end === null ? "still open" : ms(sp.end)} (seqs ${sp.start_seq}…${sp.end_seq ?? ""})`, indent);
  });
  const nav = document.createElement("div");
  nav.className = "plot-nav";
  const btn = (text, turn, disabled) => {
    const b = document.createElement("button");
    b.type = "button"; b.textContent = text; b.disabled = disabled;
    b.addEventListener("click", () => onPick(turn));
    return b;
  };
  nav.append(btn("◀ previous turn", fall.turn - 1, fall.turn <= 0),
    btn("next turn ▶", fall.turn + 1, fall.turn >= body.turns.total - 1),
    btn("last turn", null, fall.turn >= body.turns.total - 1));
  const more = fall.spans.length > MAX_ROWS ? ` (first ${MAX_ROWS} of ${fall.spans.length} spans)` : "";
  return block(`Turn ${fall.turn} waterfall: steps, model calls and tool calls`,
    `${fall.status} · ${ms(fall.duration_ms)} · ${fall.models.join(", ") || "no model"}${more}`, nav, svg,
    legend([["ok / completed", COLORS.ok], ["error / failed", COLORS.error], ["abandoned / interrupted", COLORS.warn], ["open", COLORS.open]]));
}

// ---------- the session plots' loader (live: at most every MIN_INTERVAL_MS) ----------

window.sessionPlots = (() => {
  const MIN_INTERVAL_MS = 2000;
  let current = null, turn = null, lastLoad = 0, timer = null, lastBody = null;
  const box = () => document.getElementById("plots-box");

  function render(body) {
    lastBody = body;
    const b = box();
    if (!b) return;
    performance.mark("plots-start");
    const pick = (t) => { turn = t; fetchNow(current); };
    const parts = [contextPlot(body), turnsPlot(body, body.waterfall ? body.waterfall.turn : null, pick), waterfallPlot(body, pick)];
    if (body.error) { const p = document.createElement("p"); p.className = "banner warn"; p.textContent = body.error; parts.unshift(p); }
    b.replaceChildren(...parts);
    b.setAttribute("data-as-of-seq", String(body.as_of_seq));
    performance.measure("plots-render", "plots-start");
  }

  async function fetchNow(id) {
    lastLoad = Date.now();
    const q = new URLSearchParams();
    if (turn !== null) q.set("turn", String(turn));
    try {
      const resp = await fetch(`/api/sessions/${encodeURIComponent(id)}/series?${q}`, { cache: "no-store" });
      const body = await resp.json();
      if (id !== current) return;
      if (!resp.ok) { const b = box(); if (b) { const p = document.createElement("p"); p.className = "muted"; p.textContent = `plots: ${body.error || resp.status}`; b.replaceChildren(p); } return; }
      performance.mark("plots-fetched");
      render(body);
    } catch (e) {
      const b = box();
      if (b) { const p = document.createElement("p"); p.className = "muted"; p.textContent = `plots unavailable: ${e.message}`; b.replaceChildren(p); }
    }
  }

  function load(id) {
    if (id !== current) { current = id; turn = null; lastBody = null; clearTimeout(timer); timer = null; fetchNow(id); return; }
    if (lastBody && box() && !box().firstChild) render(lastBody); // the detail was redrawn
    if (timer) return;
    const wait = Math.max(0, MIN_INTERVAL_MS - (Date.now() - lastLoad));
    timer = setTimeout(() => { timer = null; fetchNow(id); }, wait);
  }

  return { load };
})();

// ---------- tenant: activity over time ----------

function timePlot(title, note, id, buckets, series, opts = {}) {
  const w = 900, h = opts.height || 170;
  const t0 = buckets.length ? buckets[0].start_ms : Date.now() - 60000;
  const t1 = buckets.length ? buckets[buckets.length - 1].start_ms + opts.bucket : Date.now();
  const top = Math.max(1, ...series.flatMap((sr) => sr.values.map((v) => v[1] ?? 0)));
  const f = frame(w, h, t0, t1, 0, top * 1.15, { xFormat: clock, xTicks: ticks(t0, t1, 6), yTicks: 3 });
  f.svg.id = id;
  for (const sr of series) {
    if (sr.bars) {
      const bw = Math.max(1, f.X(t0 + opts.bucket) - f.X(t0) - 1);
      for (const [t, v, detail] of sr.values) {
        if (!v) continue;
        f.svg.append(s("rect", { x: f.X(t), y: f.Y(v), width: bw, height: f.Y(0) - f.Y(v), fill: sr.color, class: sr.cls }, tip(detail || `${clock(t)}: ${v}`)));
      }
      continue;
    }
    let d = "";
    for (const [t, v] of sr.values) { if (v === null || v === undefined) continue; d += `${d ? "L" : "M"}${f.X(t)},${f.Y(v)}`; }
    f.svg.append(s("path", { d, fill: "none", stroke: sr.color, "stroke-width": 1.6, class: sr.cls }));
    for (const [t, v, detail] of sr.values) {
      if (v === null || v === undefined) continue;
      f.svg.append(s("circle", { cx: f.X(t), cy: f.Y(v), r: sr.dots ? 2.2 : 1.2, fill: sr.color }, tip(detail || `${clock(t)}: ${v}`)));
    }
  }
  return block(title, note, f.svg, legend(series.map((sr) => [sr.label, sr.color])));
}

function drawFleet(body) {
  const b = body.buckets, mid = (x) => x.start_ms + body.bucket_ms / 2;
  const tt = body.totals;
  const parts = [];
  parts.push(timePlot("Sessions active", `${tt.sessions_active} sessions written in the last ${Math.round(body.window_s / 60)} min (per ${ms(body.bucket_ms)})`,
    "plot-sessions", b, [{ label: "sessions with a write", color: COLORS.line, values: b.map((x) => [x.start_ms, x.sessions, `${clock(x.start_ms)}: ${x.sessions} sessions`]), bars: true, cls: "sessions" }], { bucket: body.bucket_ms }));
  parts.push(timePlot("Events per second", `${tt.events.toLocaleString()} events admitted` + (body.feed.unmeasured ? ` (${body.feed.unmeasured} first writes not measured: their session's earlier changes are trimmed)` : ""),
    "plot-events", b, [{ label: "events admitted / s", color: COLORS.ok, values: b.map((x) => [mid(x), x.events_per_s, `${clock(x.start_ms)}: ${x.events_per_s} events/s`]), cls: "events" }], { bucket: body.bucket_ms }));
  parts.push(timePlot("Rejections and quarantines", `${tt.rejections} rejected, ${tt.quarantines} quarantined` +
    (body.quarantined.length ? `: ${body.quarantined.map((q) => `${q.session_id} (${q.kind})`).join(", ")}` : ""),
    "plot-refusals", b, [
      { label: "rejections", color: COLORS.warn, bars: true, cls: "rejections", values: b.map((x) => [x.start_ms, x.rejections, `${clock(x.start_ms)}: ${Object.entries(x.rejections_by_verdict).map(([k, n]) => `${k} ×${n}`).join(", ") || "none"}`]) },
      { label: "quarantines", color: COLORS.error, dots: true, cls: "quarantines", values: b.filter((x) => x.quarantines).map((x) => [mid(x), x.quarantines, `${clock(x.start_ms)}: ${x.quarantines} quarantined`]) }],
    { bucket: body.bucket_ms }));
  const lag = body.lag;
  if (lag) {
    const parts2 = lag.partitions;
    const series = parts2.map((p, i) => ({ label: `partition ${p}`, color: PARTITION_COLORS[i % PARTITION_COLORS.length], cls: "lag",
      values: lag.samples.map((smp) => [smp.ms, smp.offsets[String(p)] ?? null, `${clock(smp.ms)} partition ${p}: ${smp.offsets[String(p)]} records behind, ${smp.seq[String(p)] ?? "?"} events of its newest session`]) }));
    const now = lag.samples.length ? lag.samples[lag.samples.length - 1] : null;
    const note = (lag.error ? `lag unavailable: ${lag.error}` : now ? `now: ${Object.values(now.offsets).reduce((a, v) => a + v, 0)} records behind over ${parts2.length} partitions` : "sampling…") +
      ` · sampled every ${lag.interval_s} s since the dashboard started`;
    parts.push(timePlot("Worker lag per partition (records not yet in Redis)", note, "plot-lag", b, series, { bucket: body.bucket_ms }));
  }
  return parts;
}

const WINDOWS = [[120, "2 minutes"], [900, "15 minutes"], [3600, "1 hour"], [21600, "6 hours"]];

window.fleetPlots = (() => {
  const MIN_INTERVAL_MS = 2000, POLL_MS = 5000;
  let shown = false, lastLoad = 0, timer = null, poll = null, windowS = 900;
  const box = () => document.getElementById("fleet-box");

  function header(tenant) {
    const head = document.createElement("h2");
    head.textContent = `Tenant ${tenant}: the last `;
    const pick = document.createElement("select");
    pick.id = "fleet-window";
    for (const [secs, label] of WINDOWS) {
      const o = document.createElement("option");
      o.value = String(secs); o.textContent = label; o.selected = secs === windowS;
      pick.append(o);
    }
    pick.addEventListener("change", () => { windowS = Number(pick.value); fetchNow(); });
    head.append(pick);
    return head;
  }

  async function fetchNow() {
    lastLoad = Date.now();
    try {
      const resp = await fetch(`/api/tenant/series?window=${windowS}&buckets=60`, { cache: "no-store" });
      const body = await resp.json();
      const b = box();
      if (!b || !shown) return;
      if (!resp.ok) { const p = document.createElement("p"); p.className = "muted"; p.textContent = `fleet plots: ${body.error || resp.status}`; b.replaceChildren(p); return; }
      performance.mark("fleet-start");
      b.replaceChildren(header(body.tenant), ...drawFleet(body));
      b.setAttribute("data-now", String(body.now_ms));
      performance.measure("fleet-render", "fleet-start");
    } catch (e) {
      const b = box();
      if (b) { const p = document.createElement("p"); p.className = "muted"; p.textContent = `fleet plots unavailable: ${e.message}`; b.replaceChildren(p); }
    }
  }

  function refresh() {
    if (!shown || timer) return;
    const wait = Math.max(0, MIN_INTERVAL_MS - (Date.now() - lastLoad));
    timer = setTimeout(() => { timer = null; fetchNow(); }, wait);
  }

  function show(on) {
    shown = on;
    const b = box();
    if (b) b.classList.toggle("hidden", !on);
    clearInterval(poll); poll = null;
    if (on) { fetchNow(); poll = setInterval(refresh, POLL_MS); } // the lag moves without writes
  }

  function setWindow(secs) { windowS = secs; if (shown) fetchNow(); }

  return { show, refresh, setWindow };
})();
