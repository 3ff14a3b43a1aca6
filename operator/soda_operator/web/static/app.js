// kubesoda's web view: draws /api/state with Plotly and redraws on every Server-Sent Event.
// Read-only; every text from the cluster goes through textContent (never innerHTML).
"use strict";

const PALETTE = ["#2563eb", "#db2777", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#4f46e5",
                 "#be123c", "#0d9488", "#7c3aed", "#65a30d", "#c2410c", "#0369a1", "#a21caf", "#15803d"];
const PLOT_CONFIG = { displaylogo: false, responsive: true };
const MAX_STREAM_SEGMENTS = 1500;

function $(id) { return document.getElementById(id); }
function fmt(x, d = 2) { return x === null || x === undefined ? "–" : Number(x).toLocaleString("en-US", { maximumFractionDigits: d }); }
function pct(x) { return x === null || x === undefined ? "–" : (100 * x).toFixed(1) + "%"; }

function colourOf(jobs) {
  const map = {};
  jobs.forEach((j, i) => { map[j.name] = PALETTE[i % PALETTE.length]; });
  return map;
}

function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}

function fill(tableId, rows, build) {
  const tbody = $(tableId).querySelector("tbody");
  const frag = document.createDocumentFragment();
  rows.forEach((r) => frag.appendChild(build(r)));
  tbody.replaceChildren(frag);
}

function renderSummary(s) {
  $("source").textContent = s.source || "";
  const f = $("feasible");
  f.textContent = s.empty ? "none yet" : (s.feasible ? "feasible" : "infeasible");
  f.className = s.feasible || s.empty ? "" : "bad";
  $("importance").textContent = fmt(s.importance);
  $("observed").textContent = fmt(s.observedImportance);
  // the bound says whether it is proven (issue 49): an estimate may be below the best plan, its gap unknown
  $("bound").textContent = fmt(s.bound);
  $("bound-kind").textContent = s.bound === null || s.bound === undefined ? "" : (s.boundProven ? "proven" : "estimated");
  $("bound-kind").className = s.boundProven ? "" : "estimate";
  $("gap").textContent = s.gap === null || s.gap === undefined ? (s.bound === null || s.bound === undefined ? "–" : "unknown") : pct(s.gap);
  $("waterline").textContent = s.waterline === null || s.waterline === undefined ? "–" : "rank " + s.waterline;
  $("capacity").textContent = s.capacityMips ? `${fmt(s.usedMips, 0)} of ${fmt(s.capacityMips, 0)} mips planned` : "–";
  $("updated").textContent = s.time || "–";
  $("epoch").textContent = s.epoch ? `(${s.epoch} epoch, #${s.version})` : "";
  $("message").textContent = s.message || "";
}

function renderJobs(s) {
  fill("jobs", s.jobs, (j) => {
    const tr = document.createElement("tr");
    tr.dataset.job = j.name;
    tr.className = j.admitted ? "admitted" : "rejected";
    cell(tr, j.name);
    cell(tr, j.admitted ? "yes" : "no", "admitted");
    cell(tr, j.rank, "num");
    cell(tr, j.revisedRank, "num");
    cell(tr, j.template || "–");
    cell(tr, fmt(j.importance), "num");
    cell(tr, fmt(j.observedImportance), "num");
    cell(tr, fmt(j.mips, 0), "num");
    cell(tr, j.instances, "num");
    cell(tr, j.admitted ? "" : `${j.reason}: ${j.message}`, "reason");
    return tr;
  });
}

function allNodes(s) {
  const out = [];
  s.zones.forEach((z) => z.racks.forEach((r) => r.nodes.forEach((n) => out.push({ ...n, zone: z.name, rack: r.name }))));
  return out;
}

function renderNodes(s, nodes) {
  fill("nodes", nodes, (n) => {
    const tr = document.createElement("tr");
    tr.dataset.node = n.name;
    if (!n.usable) tr.className = "unusable";
    cell(tr, n.name);
    cell(tr, n.zone);
    cell(tr, n.rack);
    cell(tr, fmt(n.mips, 0), "num");
    cell(tr, fmt(n.usedMips, 0), "num");
    const u = cell(tr, "", "num");
    const bar = document.createElement("span");
    bar.className = "bar";
    bar.style.width = Math.round(40 * Math.min(1, n.utilisation)) + "px";
    u.append(bar, pct(n.utilisation));
    cell(tr, n.instances, "num");
    return tr;
  });
}

function renderInstances(s) {
  fill("instances", s.instances, (i) => {
    const tr = document.createElement("tr");
    tr.dataset.job = i.job;
    tr.dataset.node = i.node;
    if (i.pod) tr.dataset.pod = i.pod;
    cell(tr, i.job);
    cell(tr, i.pe);
    cell(tr, i.node);
    cell(tr, fmt(i.fraction, 4), "num");
    cell(tr, fmt(i.mips, 1), "num");
    cell(tr, i.pod || "–");
    return tr;
  });
}

function renderStreams(s) {
  const rows = [...s.streams].sort((a, b) => b.traffic - a.traffic);
  fill("streams", rows, (st) => {
    const tr = document.createElement("tr");
    cell(tr, st.src);
    cell(tr, st.dst + (st.interJob ? " (import)" : ""));
    cell(tr, fmt(st.rate), "num");
    cell(tr, fmt(st.traffic, 0), "num");
    return tr;
  });
}

function utilColour(u) {
  // green (idle) -> yellow -> red (full): the same scale as the nodes' colorscale
  const x = Math.max(0, Math.min(1, u || 0));
  const h = 120 - 120 * x;
  return `hsl(${h}, 70%, ${x > 0.005 ? 80 : 96}%)`;
}

function renderTopology(s, nodes, colour) {
  const shapes = [];
  const annotations = [];
  s.zones.forEach((z) => {
    shapes.push({ type: "rect", x0: z.x0, x1: z.x1, y0: Math.min(...z.racks.map((r) => r.y0)) - 0.35, y1: 1.15,
                  line: { color: "#94a3b8", width: 1, dash: "dot" }, fillcolor: z.uplink ? utilColour(z.uplink.utilisation) : "rgba(0,0,0,0)",
                  opacity: 0.35, layer: "below" });
    annotations.push({ x: (z.x0 + z.x1) / 2, y: 1.05, text: `<b>zone ${z.name}</b>` + (z.uplink ? ` · uplink ${pct(z.uplink.utilisation)}` : ""),
                       showarrow: false, font: { size: 12 } });
    z.racks.forEach((r) => {
      shapes.push({ type: "rect", x0: r.x0, x1: r.x1, y0: r.y0, y1: r.y1, line: { color: "#64748b", width: 1 },
                    fillcolor: r.uplink ? utilColour(r.uplink.utilisation) : "#f8fafc", layer: "below" });
      annotations.push({ x: (r.x0 + r.x1) / 2, y: r.y1 + 0.17, text: `rack ${r.name}` + (r.uplink ? ` · ${pct(r.uplink.utilisation)}` : ""),
                         showarrow: false, font: { size: 11, color: "#334155" } });
    });
  });
  const nodeTrace = {
    type: "scatter", mode: nodes.length <= 80 ? "markers+text" : "markers", name: "nodes",
    x: nodes.map((n) => n.x), y: nodes.map((n) => n.y), text: nodes.map((n) => n.name), textposition: "bottom center",
    textfont: { size: 10 },
    customdata: nodes.map((n) => [n.mips, n.usedMips, pct(n.utilisation), n.instances, n.usable ? "" : " (not usable)"]),
    hovertemplate: "<b>%{text}</b>%{customdata[4]}<br>%{customdata[1]:.0f} of %{customdata[0]:.0f} mips planned (%{customdata[2]})"
                   + "<br>%{customdata[3]} instance(s)<extra></extra>",
    marker: { symbol: "square", size: nodes.length <= 80 ? 46 : 18, color: nodes.map((n) => n.utilisation), cmin: 0, cmax: 1,
              colorscale: [[0, "#dcfce7"], [0.5, "#fde68a"], [1, "#ef4444"]], showscale: true,
              colorbar: { title: { text: "node CPU" }, tickformat: ".0%", len: 0.6 },
              line: { color: nodes.map((n) => (n.usable ? "#475569" : "#dc2626")), width: 1 } },
  };
  // streams: a segment between every instance of the producer and every instance of the consumer
  const where = {};
  s.instances.forEach((i) => { (where[i.peId] = where[i.peId] || []).push(i); });
  const maxT = Math.max(1e-9, ...s.streams.map((st) => st.traffic));
  const streamTraces = [];
  let segments = 0;
  [...s.streams].sort((a, b) => b.traffic - a.traffic).forEach((st) => {
    const a = where[st.src] || [], b = where[st.dst] || [];
    if (!a.length || !b.length || segments > MAX_STREAM_SEGMENTS) return;
    const x = [], y = [];
    a.forEach((p) => b.forEach((q) => { x.push(p.x, q.x, null); y.push(p.y, q.y, null); segments += 1; }));
    streamTraces.push({ type: "scatter", mode: "lines", x, y, hoverinfo: "skip", showlegend: false,
                        line: { width: 1 + 5 * Math.sqrt(st.traffic / maxT), color: st.interJob ? "rgba(147,51,234,.45)" : "rgba(30,41,59,.35)" } });
  });
  const byJob = {};
  s.instances.forEach((i) => { (byJob[i.job] = byJob[i.job] || []).push(i); });
  const instTraces = Object.keys(byJob).map((job) => ({
    type: "scatter", mode: "markers", name: job, x: byJob[job].map((i) => i.x), y: byJob[job].map((i) => i.y),
    text: byJob[job].map((i) => `<b>${job}:${i.pe}</b><br>on ${i.node}: fraction ${fmt(i.fraction, 4)}, ${fmt(i.mips, 0)} mips`
                                + (i.pod ? `<br>pod ${i.pod}` : "")),
    hovertemplate: "%{text}<extra></extra>",
    marker: { size: byJob[job].map((i) => 7 + 10 * Math.sqrt(Math.min(1, i.fraction))), color: colour[job], line: { color: "#fff", width: 1 } },
  }));
  const layout = {
    margin: { l: 10, r: 10, t: 10, b: 10 }, shapes, annotations, hovermode: "closest", showlegend: true,
    legend: { orientation: "h", y: -0.02 }, plot_bgcolor: "#fff", paper_bgcolor: "#fff",
    xaxis: { visible: false, zeroline: false }, yaxis: { visible: false, zeroline: false, scaleanchor: "x" },
    uirevision: "topology",
  };
  Plotly.react("topology", [nodeTrace, ...streamTraces, ...instTraces], layout, PLOT_CONFIG);
}

function renderLinks(s) {
  const links = s.links;
  const layout = { margin: { l: 90, r: 10, t: 10, b: 40 }, xaxis: { title: { text: "utilisation" }, tickformat: ".1%",
                           range: [0, Math.max(0.1, 1.1 * Math.max(0, ...links.map((l) => l.utilisation)))] },
                   yaxis: { automargin: true }, uirevision: "links",
                   annotations: links.length ? [] : [{ text: "one rack: no uplink is used", showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5 }] };
  Plotly.react("links", [{ type: "bar", orientation: "h", y: links.map((l) => l.name), x: links.map((l) => l.utilisation),
                           marker: { color: links.map((l) => utilColour(l.utilisation).replace(/, \d+%\)$/, ", 55%)")) },
                           customdata: links.map((l) => [l.traffic, l.capacity]),
                           hovertemplate: "%{y}: %{x:.1%}<br>%{customdata[0]:.3s} of %{customdata[1]:.3s} bytes/s<extra></extra>" }],
               layout, PLOT_CONFIG);
}

function renderHistory(s) {
  const h = s.history || [];
  const t = h.map((e) => e.time);
  const changes = h.map((e) => Object.values(e.changes || {}).reduce((a, b) => a + b, 0));
  const traces = [
    { type: "scatter", mode: "lines+markers", name: "projected importance", x: t, y: h.map((e) => e.importance),
      text: h.map((e) => `${e.epoch} epoch: ${e.admitted}/${e.jobs} jobs admitted`), hovertemplate: "%{y:.2f}<br>%{text}<extra></extra>" },
    { type: "scatter", mode: "lines+markers", name: "observed importance", x: t, y: h.map((e) => e.observedImportance) },
    { type: "bar", name: "changes applied", x: t, y: changes, yaxis: "y2", opacity: 0.4, textposition: "none",
      text: h.map((e) => Object.entries(e.changes || {}).map(([k, v]) => `${k} ${v}`).join(", ") || "none"),
      hovertemplate: "%{text}<extra></extra>" },
  ];
  Plotly.react("history", traces, {
    margin: { l: 50, r: 50, t: 10, b: 40 }, legend: { orientation: "h", y: -0.25 }, uirevision: "history",
    yaxis: { title: { text: "importance" }, rangemode: "tozero" },
    yaxis2: { title: { text: "changes" }, overlaying: "y", side: "right", rangemode: "tozero", showgrid: false },
  }, PLOT_CONFIG);
}

function renderCurves(s, colour) {
  const traces = (s.curves || []).map((c) => ({
    type: "scatter", mode: "lines", name: c.jobs.join(" + "), x: c.mips, y: c.importance,
    line: { color: colour[c.jobs[0]], shape: "hv" },
  }));
  Plotly.react("curves", traces, {
    margin: { l: 50, r: 10, t: 10, b: 40 }, legend: { orientation: "h", y: -0.25 }, uirevision: "curves",
    xaxis: { title: { text: "mips given to the component" } }, yaxis: { title: { text: "best importance" } },
    annotations: traces.length ? [] : [{ text: "this policy keeps no curves", showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5 }],
  }, PLOT_CONFIG);
}

function render(s) {
  window.kubesodaState = s;  // for people poking at it in the console (and the browser test)
  const colour = colourOf(s.jobs);
  const nodes = allNodes(s);
  renderSummary(s);
  renderJobs(s);
  renderNodes(s, nodes);
  renderInstances(s);
  renderStreams(s);
  renderTopology(s, nodes, colour);
  renderLinks(s);
  renderHistory(s);
  renderCurves(s, colour);
  document.body.dataset.version = String(s.version || 0);
}

function connect() {
  const conn = $("conn");
  if (!window.EventSource) {  // no SSE: poll
    const poll = () => fetch("/api/state").then((r) => r.json()).then(render).finally(() => setTimeout(poll, 5000));
    poll();
    return;
  }
  const es = new EventSource("/api/events");
  es.addEventListener("state", (e) => {
    conn.textContent = "live";
    conn.className = "conn live";
    render(JSON.parse(e.data));
  });
  es.onerror = () => { conn.textContent = "reconnecting"; conn.className = "conn"; };  // EventSource retries by itself
}

connect();
