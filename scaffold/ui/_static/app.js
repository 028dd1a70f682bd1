// Scaffold's run viewer: one page, hash routes, drawn from the JSON API of scaffold/ui/_app.py. No dependencies.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const COLLAPSE_OVER = 24;      // a node with more traces starts collapsed (click to expand)
const BOX_W = 104, BOX_H = 24, ROW = 30, COL = 150, TOP = 40, LEFT = 16;
const main = document.getElementById("main");

// -- small helpers -------------------------------------------------------------------------------
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key === "style") el.style.cssText = value;  // through the CSSOM: the CSP forbids style attributes
    else el.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}
function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, value);
  }
  for (const child of children.flat()) if (child !== null && child !== undefined) el.append(child instanceof Node ? child : String(child));
  return el;
}
async function api(path) {
  const response = await fetch(path, {headers: {accept: "application/json"}});
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}
const fmt = {
  int: (v) => v === null || v === undefined ? "–" : Number(v).toLocaleString("en-US"),
  num: (v, d = 3) => v === null || v === undefined ? "–" : Number(v).toFixed(d),
  cost: (v) => v === null || v === undefined ? "?" : "$" + Number(v).toFixed(4),
  time: (t) => t ? new Date(t * 1000).toISOString().replace("T", " ").slice(0, 19) : "–",
  secs: (v) => v === null || v === undefined ? "–" : Number(v).toFixed(2) + " s",
};
function runLink(id) { return h("a", {href: "#/run/" + encodeURIComponent(id)}, id); }
function setPage(title, ...content) {
  main.replaceChildren(h("h1", {}, title), ...content);
}
function fail(error) { main.replaceChildren(h("p", {class: "error", "data-error": "1"}, String(error.message || error))); }

// -- routing ------------------------------------------------------------------------------------
const routes = [
  [/^#\/run\/(.+)$/, (m) => showRun(decodeURIComponent(m[1]))],
  [/^#\/evaluations$/, () => showEvaluations()],
  [/^#\/compare\/([^/]+)\/([^/]+)$/, (m) => showCompare(decodeURIComponent(m[1]), decodeURIComponent(m[2]))],
  [/^#\/training(?:\/(\d+))?$/, (m) => showTraining(m[1])],
  [/^#\/runs(?:\?(.*))?$/, (m) => showRuns(new URLSearchParams(m[1] || ""))],
];
async function route() {
  const hash = location.hash || "#/runs";
  document.body.dataset.ready = "";
  window.__renderStart = performance.now();
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", hash.startsWith("#/" + a.dataset.nav));
  for (const [pattern, show] of routes) {
    const m = hash.match(pattern);
    if (m) {
      try { await show(m); } catch (error) { fail(error); }
      window.__renderMs = performance.now() - window.__renderStart;
      document.body.dataset.ready = hash.split(/[/?]/)[1] || "runs";
      return;
    }
  }
  location.hash = "#/runs";
}
window.addEventListener("hashchange", route);

// -- runs ---------------------------------------------------------------------------------------
async function showRuns(params) {
  const query = new URLSearchParams(params);
  if (!query.get("limit")) query.set("limit", "50");
  const page = await api("/api/runs?" + query.toString());
  const form = h("form", {class: "filters", onsubmit: (event) => {
    event.preventDefault();
    const next = new URLSearchParams();
    for (const el of form.elements) {
      if (!el.name || !el.value) continue;
      next.set(el.name, el.type === "datetime-local" ? String(Date.parse(el.value + "Z") / 1000) : el.value);
    }
    location.hash = "#/runs?" + next.toString();
  }});
  for (const key of ["graph", "dataset", "model", "status"]) {
    const select = h("select", {name: key, "data-filter": key}, h("option", {value: ""}, "any"),
      (page.choices[key] || []).map((v) => h("option", {value: v, selected: page.filters[key] === v}, v)));
    form.append(h("label", {}, key, select));
  }
  for (const key of ["since", "until"]) {
    const value = page.filters[key] ? new Date(page.filters[key] * 1000).toISOString().slice(0, 16) : "";
    form.append(h("label", {}, key + " (UTC)", h("input", {type: "datetime-local", name: key, value})));
  }
  form.append(h("button", {type: "submit", "data-apply": "1"}, "Apply"), h("a", {href: "#/runs"}, "clear"));
  const offset = page.offset, shown = page.runs.length;
  const move = (delta) => { const next = new URLSearchParams(query); next.set("offset", String(Math.max(0, offset + delta))); location.hash = "#/runs?" + next.toString(); };
  const pager = h("div", {class: "pager"},
    h("button", {onclick: () => move(-page.limit), disabled: offset === 0, "data-page": "prev"}, "‹ newer"),
    h("span", {"data-count": page.total}, shown ? `${offset + 1}–${offset + shown} of ${fmt.int(page.total)}` : `0 of ${fmt.int(page.total)}`),
    h("button", {onclick: () => move(page.limit), disabled: offset + shown >= page.total, "data-page": "next"}, "older ›"));
  const t = page.totals;
  const totals = h("p", {class: "muted"}, `${fmt.int(page.total)} runs · ${fmt.int(t.calls)} calls · ` +
    `${fmt.int(t.prompt_tokens + t.completion_tokens)} tokens · ${fmt.cost(t.cost)} · ${fmt.int(t.errors)} failed`);
  const rows = page.runs.map((r) => h("tr", {"data-run": r.id},
    h("td", {}, runLink(r.id)), h("td", {}, r.graph), h("td", {class: "status-" + r.status}, r.status),
    h("td", {}, r.dataset ?? ""), h("td", {}, r.problem ?? ""), h("td", {}, r.answer ?? ""),
    h("td", {class: "num"}, fmt.int(r.calls)), h("td", {class: "num"}, fmt.int(r.prompt_tokens + r.completion_tokens)),
    h("td", {class: "num"}, fmt.cost(r.cost)), h("td", {class: "num"}, fmt.secs(r.wall_time)), h("td", {}, fmt.time(r.started_at))));
  const table = h("table", {id: "runs"}, h("thead", {}, h("tr", {}, ["run", "graph", "status", "dataset", "problem",
    "answer", "calls", "tokens", "cost", "wall", "started"].map((c) => h("th", {}, c)))), h("tbody", {}, rows));
  setPage("Runs", form, totals, pager, table);
}

// -- one run ------------------------------------------------------------------------------------
async function showRun(runId) {
  const view = await api("/api/runs/" + encodeURIComponent(runId));
  const run = view.run;
  const hasRewards = view.traces.some((t) => t.reward !== null);
  const hasReference = run.reference !== null;
  const state = {colour: hasRewards ? "reward" : "correct", expanded: new Set(), selected: null};
  for (const node of view.nodes) if (node.traces <= COLLAPSE_OVER) state.expanded.add(node.name);
  const summary = h("div", {class: "summary"},
    [["graph", run.graph], ["status", run.status], ["answer", run.answer ?? "–"], ["reference", run.reference ?? "–"],
     ["calls", fmt.int(run.calls)], ["tokens", fmt.int(run.prompt_tokens + run.completion_tokens)], ["cost", fmt.cost(run.cost)],
     ["wall", fmt.secs(run.wall_time)], ["seed", run.seed], ["attempts", run.attempts]].map(([k, v]) => h("div", {}, h("b", {}, k), v)));
  const problem = run.inputs && run.inputs.problem ? h("details", {open: true}, h("summary", {}, "problem"), h("pre", {}, run.inputs.problem)) : null;
  const colour = h("select", {"data-colour": "1", onchange: (e) => { state.colour = e.target.value; draw(); }},
    h("option", {value: "reward", selected: state.colour === "reward", disabled: !hasRewards}, "colour by reward"),
    h("option", {value: "correct", selected: state.colour === "correct", disabled: !hasReference}, "colour by right / wrong"));
  const expandAll = h("button", {"data-expand-all": "1", onclick: () => { view.nodes.forEach((n) => state.expanded.add(n.name)); draw(); }}, "expand all");
  const legend = h("div", {class: "legend"}, colour, expandAll,
    h("span", {}, h("span", {class: "swatch", style: "background:var(--right)"}), "right / reward 1"),
    h("span", {}, h("span", {class: "swatch", style: "background:var(--wrong)"}), "wrong / reward 0"),
    h("span", {}, h("span", {class: "swatch", style: "background:var(--unknown)"}), "unknown"),
    h("span", {class: "muted"}, "dashed red: failed · dashed grey: cancelled · ↻: retried"));
  const box = h("div", {class: "dag-box"});
  const details = h("div", {class: "details card", id: "details"}, h("p", {class: "muted"}, "Click a trace to see its prompt and text."));
  const byId = new Map(view.traces.map((t) => [t.id, t]));

  function fill(t) {
    const value = state.colour === "reward" ? t.reward : (t.correct === null ? null : (t.correct ? 1 : 0));
    if (value === null || value === undefined) return "var(--unknown)";
    const v = Math.max(0, Math.min(1, value));
    const mix = (a, b) => Math.round(a + (b - a) * v);
    return `rgb(${mix(209, 46)},${mix(69, 157)},${mix(59, 87)})`;
  }
  function draw() {
    const columns = view.nodes.map((node, i) => ({node, x: LEFT + i * COL,
      traces: view.traces.filter((t) => (t.column ?? t.node) === node.name).sort((a, b) => a.index - b.index)}));
    const where = new Map();
    let height = TOP;
    for (const col of columns) {
      if (state.expanded.has(col.node.name)) {
        col.traces.forEach((t, row) => where.set(t.id, {x: col.x, y: TOP + row * ROW}));
        height = Math.max(height, TOP + col.traces.length * ROW);
      } else {
        for (const t of col.traces) where.set(t.id, {x: col.x, y: TOP, collapsed: col.node.name});
        height = Math.max(height, TOP + ROW * 2);
      }
    }
    const svg = s("svg", {width: LEFT * 2 + columns.length * COL, height: height + 20, id: "dag", "data-run": run.id});
    const edges = s("g", {class: "edges"});
    const drawn = new Set();
    for (const [from, to] of view.edges) {
      const a = where.get(from), b = where.get(to);
      if (!a || !b) continue;
      const key = (a.collapsed || from) + "->" + (b.collapsed || to);
      if (drawn.has(key)) continue;
      drawn.add(key);
      const x1 = a.x + BOX_W, y1 = a.y + BOX_H / 2, x2 = b.x, y2 = b.y + BOX_H / 2, mid = (x1 + x2) / 2;
      edges.append(s("path", {class: "edge", d: `M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2},${y2}`,
        "data-edge": `${from}->${to}`, "data-from": from, "data-to": to}));
    }
    svg.append(edges);
    for (const col of columns) {
      svg.append(s("text", {x: col.x, y: 18, class: "node-label"}, `${col.node.name} (${col.node.traces})`));
      if (!state.expanded.has(col.node.name)) {
        const right = col.traces.filter((t) => (state.colour === "reward" ? t.reward === 1 : t.correct === true)).length;
        svg.append(s("g", {class: "collapsed", "data-node": col.node.name, onclick: () => { state.expanded.add(col.node.name); draw(); }},
          s("rect", {x: col.x, y: TOP, width: BOX_W, height: BOX_H * 2, rx: 4}),
          s("text", {x: col.x + 6, y: TOP + 16}, `${col.traces.length} traces`),
          s("text", {x: col.x + 6, y: TOP + 32}, `${right} right · expand`)));
        continue;
      }
      for (const t of col.traces) {
        const p = where.get(t.id);
        const classes = ["trace", t.status !== "ok" ? (t.status === "cancelled" ? "cancelled" : "failed") : "",
                         state.selected === t.id ? "selected" : ""].join(" ");
        const label = `#${t.index} ${t.label ?? t.answer ?? (t.status !== "ok" ? t.status : "–")}`.slice(0, 15) + (t.attempt > 1 ? " ↻" : "");
        svg.append(s("g", {class: classes, "data-trace": t.id, "data-status": t.status, onclick: () => select(t.id)},
          s("title", {}, `${t.id}\nanswer: ${t.answer ?? "–"}\nreward: ${t.reward ?? "–"}`),
          s("rect", {x: p.x, y: p.y, width: BOX_W, height: BOX_H, rx: 4, fill: fill(t)}),
          s("text", {x: p.x + 6, y: p.y + 16, fill: "#fff"}, label)));
      }
    }
    box.replaceChildren(svg);
    highlight();
  }
  function highlight() {
    for (const edge of box.querySelectorAll("path.edge")) {
      edge.classList.toggle("hot", state.selected !== null && (edge.dataset.to === state.selected || edge.dataset.from === state.selected));
    }
  }
  function select(id) {
    state.selected = id;
    const t = byId.get(id);
    for (const g of box.querySelectorAll("g.trace")) g.classList.toggle("selected", g.dataset.trace === id);
    highlight();
    const prompt = Array.isArray(t.prompt) ? t.prompt.map(([role, text]) => `[${role}]\n${text}`).join("\n\n") : (t.prompt ?? "");
    details.replaceChildren(
      h("h2", {}, t.id),
      h("table", {}, h("tbody", {}, [["node", t.node], ["index", t.index], ["kind", t.kind], ["model", t.model ?? "–"],
        ["status", t.status + (t.error ? `: ${t.error}` : "")], ["answer", t.answer ?? "–"], ["reward", t.reward ?? "–"],
        ["right", t.correct === null ? "–" : (t.correct ? "yes" : "no")],
        ["tokens", `${fmt.int(t.prompt_tokens)} in, ${fmt.int(t.completion_tokens)} out`], ["cost", fmt.cost(t.cost)],
        ["latency", fmt.secs(t.latency)], ["attempts", t.attempt]].map(([k, v]) => h("tr", {}, h("th", {}, k), h("td", {}, String(v)))))),
      t.inputs.length ? h("div", {}, h("h2", {}, `read ${t.inputs.length} trace(s)`),
        h("ul", {}, t.inputs.map((i) => h("li", {}, h("a", {href: "#", "data-input": i, onclick: (e) => { e.preventDefault(); state.expanded.add(byId.get(i)?.column ?? byId.get(i)?.node); draw(); select(i); }}, i))))) : null,
      h("h2", {}, "text"), h("pre", {"data-text": "1"}, t.text || ""),
      prompt ? h("details", {}, h("summary", {}, "prompt"), h("pre", {}, prompt)) : null);
  }
  const rollup = (title, rows) => h("div", {}, h("h2", {}, title), h("table", {"data-rollup": title},
    h("thead", {}, h("tr", {}, ["", "calls", "prompt tokens", "completion tokens", "cost", "latency (sum)", "errors"].map((c) => h("th", {class: c ? "num" : ""}, c)))),
    h("tbody", {}, Object.entries(rows).map(([key, t]) => h("tr", {}, h("td", {}, key), h("td", {class: "num"}, fmt.int(t.calls)),
      h("td", {class: "num"}, fmt.int(t.prompt_tokens)), h("td", {class: "num"}, fmt.int(t.completion_tokens)),
      h("td", {class: "num"}, fmt.cost(t.cost)), h("td", {class: "num"}, fmt.secs(t.latency)), h("td", {class: "num"}, fmt.int(t.errors)))))));
  setPage(`Run ${run.id}`, summary, problem, legend, h("div", {class: "run-layout"}, box, details),
    rollup("per node", view.rollups.node), rollup("per model", view.rollups.model));
  draw();
}

// -- evaluations --------------------------------------------------------------------------------
async function showEvaluations() {
  const view = await api("/api/evaluations");
  if (!view.rows.length) { setPage("Evaluations", h("p", {class: "muted"}, "No evaluation in this store yet (scaffold eval ...).")); return; }
  const chosen = [];
  const go = h("button", {disabled: true, "data-compare": "1", onclick: () => { location.hash = `#/compare/${encodeURIComponent(chosen[0])}/${encodeURIComponent(chosen[1])}`; }}, "compare the two chosen");
  const columns = Object.keys(view.rows[0]);
  const table = h("table", {id: "evaluations"}, h("thead", {}, h("tr", {}, h("th", {}, ""), columns.map((c) => h("th", {}, c)))),
    h("tbody", {}, view.rows.map((row) => h("tr", {"data-evaluation": row.evaluation},
      h("td", {}, h("input", {type: "checkbox", "data-pick": row.evaluation, onchange: (e) => {
        const name = row.evaluation;
        if (e.target.checked) chosen.push(name); else chosen.splice(chosen.indexOf(name), 1);
        go.disabled = chosen.length !== 2;
      }})),
      columns.map((c) => h("td", {class: typeof row[c] === "number" ? "num" : ""}, typeof row[c] === "number"
        ? (Number.isInteger(row[c]) ? fmt.int(row[c]) : fmt.num(row[c])) : (row[c] ?? "")))))));
  setPage("Evaluations", table, h("p", {}, go), h("div", {class: "charts"},
    chart("accuracy against tokens per problem", scatterSeries(view.plots), {xLabel: "tokens per problem", xLog: true, yLabel: "accuracy"}),
    chart("pass@k", view.plots.map((p) => ({name: p.name, points: Object.entries(p.pass_at_k).map(([k, v]) => [Number(k), v])})),
      {xLabel: "k", xLog: true, yLabel: "pass@k"})));
}
function scatterSeries(plots) {
  return plots.map((p) => ({name: p.name, points: [[p.tokens, p.accuracy]], interval: [p.low, p.high], dots: true}));
}

async function showCompare(a, b) {
  const view = await api(`/api/compare?a=${encodeURIComponent(a)}&b=${encodeURIComponent(b)}`);
  const d = view.difference;
  const only = h("input", {type: "checkbox", checked: true, "data-only-differing": "1", onchange: () => render()});
  const body = h("tbody");
  function render() {
    const rows = view.problems.filter((p) => !only.checked || p.differs);
    body.replaceChildren(...rows.map((p) => h("tr", {class: p.differs ? "differs" : "", "data-item": p.item},
      h("td", {class: "num"}, p.item), h("td", {}, p.problem ?? ""), h("td", {}, p.reference ?? ""),
      cell(p.a), cell(p.b))));
  }
  const cell = (o) => o ? h("td", {}, o.correct === null ? "–" : (o.correct ? "✓ " : "✗ "), o.answer ?? "–", " ", runLink(o.run_id)) : h("td", {}, "missing");
  setPage(`${a} against ${b}`,
    h("p", {}, `accuracy difference ${fmt.num(d.value)} [${fmt.num(d.low)}, ${fmt.num(d.high)}] over ${d.problems} problems; ` +
      `right only in ${a}: ${d.only_a}, only in ${b}: ${d.only_b}`),
    h("label", {}, only, " only the problems where they differ"),
    h("table", {id: "compare"}, h("thead", {}, h("tr", {}, ["item", "problem", "reference", a, b].map((c) => h("th", {}, c)))), body));
  render();
}

// -- training -----------------------------------------------------------------------------------
async function showTraining(index) {
  const listing = await api("/api/training");
  if (!listing.logs.length) { setPage("Training", h("p", {class: "muted"}, "No training log given (scaffold ui --training-log out/train/log.jsonl).")); return; }
  const chosen = index === undefined ? 0 : Number(index);
  const log = await api(`/api/training/${chosen}`);
  const pick = h("p", {}, listing.logs.map((l) => h("a", {href: `#/training/${l.index}`, style: "margin-right:12px", "data-log": l.index},
    l.index === chosen ? h("b", {}, l.name) : l.name)));
  const steps = log.steps;
  const series = (title, keys) => chart(title, keys.map(([name, get]) => ({name, points: steps.map((m) => [m.step, get(m)]).filter(([, v]) => v !== null && v !== undefined)})),
    {xLabel: "step", yLabel: title});
  setPage(`Training: ${log.name}`, pick, h("p", {class: "muted"}, `${steps.length} steps from ${log.path}` + (log.skipped ? ` (${log.skipped} unreadable lines)` : "")),
    h("div", {class: "charts"},
      series("reward", [["reward_mean", (m) => m.reward_mean]]),
      series("accuracy", [["accuracy", (m) => m.accuracy]]),
      series("advantage", [["mean", (m) => m.advantage_mean], ["std", (m) => m.advantage_std], ["|max|", (m) => m.advantage_abs_max]]),
      series("entropy", [["entropy", (m) => m.entropy]]),
      series("KL to the start", [["kl", (m) => m.kl]]),
      series("tokens/s", [["update", (m) => m.tokens_per_s]]),
      series("loss", [["loss", (m) => m.loss]])));
}

// -- charts (SVG, no library) -------------------------------------------------------------------
const PALETTE = ["#2b59c3", "#d1453b", "#2e9d57", "#c98a12", "#7a4cc2", "#14868c", "#b8467e", "#5b6270"];
function chart(title, series, options) {
  const W = 340, H = 200, L = 44, R = 10, T = 8, B = 30;
  const points = series.flatMap((x) => x.points);
  const svg = s("svg", {width: W, height: H + 18, "data-chart": title});
  if (!points.length) return h("div", {class: "chart"}, h("h3", {}, title), h("p", {class: "muted"}, "no data"));
  const tx = (v) => options.xLog ? Math.log10(Math.max(v, 1e-9)) : v;
  const xs = points.map(([x]) => tx(x)), ys = points.map(([, y]) => y).concat(series.flatMap((x) => x.interval || []));
  let [x0, x1] = [Math.min(...xs), Math.max(...xs)], [y0, y1] = [Math.min(...ys), Math.max(...ys)];
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  if (y0 === y1) { y0 -= 0.5; y1 += 0.5; }
  const px = (x) => L + (tx(x) - x0) / (x1 - x0) * (W - L - R), py = (y) => T + (1 - (y - y0) / (y1 - y0)) * (H - T - B);
  for (let i = 0; i <= 4; i++) {
    const y = y0 + (y1 - y0) * i / 4;
    svg.append(s("line", {class: "grid", x1: L, x2: W - R, y1: py(y), y2: py(y)}), s("text", {x: 2, y: py(y) + 4}, fmt.num(y, 2)));
  }
  svg.append(s("line", {class: "axis", x1: L, x2: W - R, y1: H - B, y2: H - B}),
    s("text", {x: L, y: H - B + 14}, options.xLog ? fmt.int(10 ** x0) : fmt.num(x0, 0)),
    s("text", {x: W - R - 40, y: H - B + 14}, options.xLog ? fmt.int(10 ** x1) : fmt.num(x1, 0)),
    s("text", {x: L + 80, y: H - 4}, options.xLabel));
  series.forEach((x, i) => {
    const colour = PALETTE[i % PALETTE.length];
    if (x.dots) {
      for (const [a, b] of x.points) {
        if (x.interval) svg.append(s("line", {x1: px(a), x2: px(a), y1: py(x.interval[0]), y2: py(x.interval[1]), stroke: colour}));
        svg.append(s("circle", {cx: px(a), cy: py(b), r: 4, fill: colour}, s("title", {}, `${x.name}: ${fmt.num(b)}`)));
      }
    } else {
      svg.append(s("path", {class: "series", stroke: colour, d: x.points.map(([a, b], j) => `${j ? "L" : "M"}${px(a)},${py(b)}`).join(" ")}));
    }
  });
  const legend = h("div", {class: "legend"}, series.map((x, i) => h("span", {}, h("span", {class: "swatch", style: `background:${PALETTE[i % PALETTE.length]}`}), x.name)));
  return h("div", {class: "chart"}, h("h3", {}, title), svg, legend);
}

route();
