// The memory view: GET /api/memory?user=ID, one row per memory, sources linked to the
// session timeline. Text goes in with textContent only (memories are user content).
"use strict";
const box = document.getElementById("memory");
const err = document.getElementById("error");

function cell(row, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  row.appendChild(td);
  return td;
}

async function show(user) {
  err.classList.add("hidden");
  const res = await fetch(`/api/memory?user=${encodeURIComponent(user)}`,
                          {credentials: "same-origin"});
  const body = await res.json();
  if (!res.ok) { err.textContent = body.error || res.statusText; err.classList.remove("hidden"); return; }
  box.textContent = "";
  const title = document.createElement("h2");
  title.textContent = `${body.namespace} (${body.memories.length})`;
  box.appendChild(title);
  const table = document.createElement("table");
  const head = table.createTHead().insertRow();
  for (const h of ["memory", "kind", "status", "sources"]) cell(head, h);
  const tbody = table.createTBody();
  for (const m of body.memories) {
    const row = tbody.insertRow();
    cell(row, m.readable ? (typeof m.content === "string" ? m.content : JSON.stringify(m.content))
                         : "[content unavailable]");
    cell(row, m.kind);
    cell(row, m.status, m.status === "pending" ? "warn" : "");
    const td = cell(row, "");
    for (const s of m.sources) {
      const a = document.createElement("a");
      a.href = s.link;
      a.textContent = `${s.session_id} @ ${s.seqs.join(",")}`;
      td.appendChild(a);
      td.appendChild(document.createTextNode(" "));
    }
  }
  box.appendChild(table);
}

document.getElementById("who").addEventListener("submit", (e) => {
  e.preventDefault();
  const user = document.getElementById("user").value.trim();
  history.replaceState(null, "", `#user=${encodeURIComponent(user)}`);
  show(user);
});
const start = new URLSearchParams(location.hash.slice(1)).get("user");
if (start) { document.getElementById("user").value = start; show(start); }
