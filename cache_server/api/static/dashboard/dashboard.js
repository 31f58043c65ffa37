// The dashboard's only script: local times, live events (server-sent events), live totals,
// a running run's progress, the coloured task graph and sorting a table page. No library.
"use strict";

function showTimes(root) {
  for (const t of root.querySelectorAll("time[data-epoch]")) {
    const d = new Date(parseFloat(t.dataset.epoch) * 1000);
    t.textContent = d.toLocaleString();
    t.dateTime = d.toISOString();
  }
}

function escapeHtml(s) {
  return String(s).replace(/[&<>"']/g, (c) => "&#" + c.charCodeAt(0) + ";");
}

function eventItem(e) {
  const li = document.createElement("li");
  li.className = "event new " + e.kind;
  let what;
  if (e.kind === "lookup") what = `${e.found} found, ${e.missing} missing`;
  else if (e.kind === "run") what = `<a href="/runs/${escapeHtml(e.run)}">${escapeHtml(e.run.slice(0, 8))}</a> ` +
    escapeHtml(e.status) + (e.stored != null ? `, stored ${e.stored}` : "");
  else what = `<a href="/entries/${escapeHtml(e.hash)}">${escapeHtml(e.label || e.hash.slice(0, 12))}</a>` +
    (e.seconds ? ` (${e.seconds.toFixed(2)} s saved)` : "") +
    (e.run ? ` <a class="run" href="/runs/${escapeHtml(e.run)}">run ${escapeHtml(e.run.slice(0, 8))}</a>` : "");
  li.innerHTML = `<time data-epoch="${e.time}"></time> <b>${escapeHtml(e.kind)}</b> ${what}`;
  showTimes(li);
  return li;
}

async function refreshTotals() {
  const r = await fetch("/totals", { credentials: "same-origin" });
  if (!r.ok) return;
  const s = await r.json();
  const set = (id, v) => { const el = document.getElementById(id); if (el) el.textContent = v; };
  set("t-entries", s.entries);
  set("t-hit-rate", (100 * s.hit_rate).toFixed(1) + "%");
  set("t-found", s.found); set("t-misses", s.misses); set("t-served", s.served);
  set("t-saved", s.saved_seconds.toFixed(1) + " s"); set("t-stores", s.stores);
}

function followEvents() {
  const list = document.getElementById("events");
  if (!list || !window.EventSource) return;
  const source = new EventSource("/events/stream?after=" + encodeURIComponent(list.dataset.after));
  let pending = null;
  source.onmessage = (msg) => {
    const e = JSON.parse(msg.data);
    list.prepend(eventItem(e));
    while (list.children.length > 200) list.lastElementChild.remove();
    if (e.kind === "run") refreshRuns();
    if (!pending) pending = setTimeout(() => { pending = null; refreshTotals(); }, 300);
  };
}

async function refreshRuns() {
  const r = await fetch("/", { credentials: "same-origin", headers: { Accept: "text/html" } });
  if (!r.ok) return;
  const doc = new DOMParser().parseFromString(await r.text(), "text/html");
  const fresh = doc.querySelector("#runs tbody");
  const table = document.querySelector("#runs tbody");
  if (fresh && table) { table.replaceWith(fresh); showTimes(fresh); }
}

function followRun() {
  const box = document.getElementById("run");
  if (!box || box.dataset.status !== "running") return;
  const timer = setInterval(async () => {
    const r = await fetch("/runs/" + box.dataset.run + "/summary", { credentials: "same-origin" });
    if (!r.ok) return;
    const run = await r.json();
    const bar = document.getElementById("progress");
    bar.max = run.scheduled || 1; bar.value = run.done;
    document.getElementById("progress-text").textContent =
      `${run.done} of ${run.scheduled} scheduled tasks done`;
    document.getElementById("run-status").textContent = run.status;
    if (run.status !== "running") { clearInterval(timer); location.reload(); }
  }, 1000);
}

// Layers by longest path from the roots; a node's tooltip names its key, state and reason.
function drawGraph() {
  const box = document.getElementById("graph");
  if (!box) return;
  const tasks = JSON.parse(box.dataset.tasks || "[]");
  if (!tasks.length) return;
  if (tasks.length > 2000) {
    box.textContent = `${tasks.length} tasks: too many to draw; the counts above and the run's task list (GET /v1/runs/…) tell what happened.`;
    return;
  }
  const depth = tasks.map(() => 0);
  for (let i = 0; i < tasks.length; i++)
    for (const d of tasks[i].deps) depth[i] = Math.max(depth[i], depth[d] + 1);
  const layers = [];
  tasks.forEach((t, i) => (layers[depth[i]] = layers[depth[i]] || []).push(i));
  const gapX = 26, gapY = 40, r = 8;
  const widest = Math.max(...layers.map((l) => l.length));
  const width = Math.max(200, widest * gapX + 40), height = layers.length * gapY + 30;
  const pos = [];
  layers.forEach((layer, y) => layer.forEach((i, x) => {
    pos[i] = [20 + (x + 0.5) * (width - 40) / layer.length, 20 + y * gapY];
  }));
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("width", width); svg.setAttribute("height", height);
  tasks.forEach((t, i) => t.deps.forEach((d) => {
    const line = document.createElementNS(ns, "line");
    line.setAttribute("x1", pos[d][0]); line.setAttribute("y1", pos[d][1]);
    line.setAttribute("x2", pos[i][0]); line.setAttribute("y2", pos[i][1]);
    svg.appendChild(line);
  }));
  tasks.forEach((t, i) => {
    const c = document.createElementNS(ns, "circle");
    c.setAttribute("cx", pos[i][0]); c.setAttribute("cy", pos[i][1]); c.setAttribute("r", r);
    c.setAttribute("class", "task " + t.state);
    c.dataset.key = t.key;
    const title = document.createElementNS(ns, "title");
    const why = t.why ? "\nwhy: " + t.why : "";
    title.textContent = `${t.label}: ${t.state}${t.reason ? " (" + t.reason + ")" : ""}${why}\n${t.key}`;
    c.appendChild(title);
    svg.appendChild(c);
  });
  box.appendChild(svg);
}

function sortableTables() {
  for (const table of document.querySelectorAll("table.sortable")) {
    table.querySelectorAll("th[data-sort]").forEach((th, col) => {
      th.addEventListener("click", () => {
        const rows = [...table.tBodies[0].rows];
        const numeric = th.dataset.sort === "num";
        const dir = th.dataset.dir === "desc" ? 1 : -1;
        th.dataset.dir = dir === 1 ? "asc" : "desc";
        const value = (row) => numeric ? parseFloat(row.cells[col].dataset.v)
                                       : row.cells[col].textContent;
        rows.sort((a, b) => (value(a) > value(b) ? 1 : value(a) < value(b) ? -1 : 0) * dir);
        rows.forEach((row) => table.tBodies[0].appendChild(row));
      });
    });
  }
}

showTimes(document);
followEvents();
followRun();
drawGraph();
sortableTables();
