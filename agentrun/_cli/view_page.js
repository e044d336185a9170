"use strict";
// agentrun view: every string of the data goes into the page as text (textContent, SVG text
// nodes, attribute values that are never URLs or handlers), never as markup.
(function () {
  const PAGE = 200;
  const SVG = "http://www.w3.org/2000/svg";
  const COLORS = ["#3559c7", "#d98a1c", "#1a7f4b", "#c0362c", "#7a5cc2", "#1f9bb4", "#8a8f99"];
  const embeddedNode = document.getElementById("agentrun-data");
  const embedded = embeddedNode ? JSON.parse(embeddedNode.textContent) : null;
  const state = { data: null, version: -1, session: null, shown: PAGE, sort: {}, filter: "" };

  // Control characters (a terminal's escapes) shown as JSON writes them, never passed on.
  const visible = (text) => String(text).replace(/[\u0000-\u0008\u000b-\u001f\u007f]/g,
    (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (key === "class") node.className = value;
      else if (key === "title") node.title = String(value);
      else if (key.startsWith("data-")) node.setAttribute(key, String(value));
      else if (key === "onclick") node.addEventListener("click", value);
      else node[key] = value;
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(visible(child)));
    }
    return node;
  }
  function svg(tag, attrs, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
    if (text !== undefined) node.textContent = visible(text);
    return node;
  }
  const num = (v) => typeof v === "number" && isFinite(v);
  const money = (v) => (num(v) ? "$" + v.toFixed(4) : "-");
  const secs = (v) => (num(v) ? v.toFixed(1) + "s" : "-");
  const pct = (v) => (num(v) ? (100 * v).toFixed(1) + "%" : "-");
  const tokens = (v) => (!num(v) ? "-" : v >= 1e6 ? (v / 1e6).toFixed(2) + "M"
    : v >= 10000 ? (v / 1000).toFixed(1) + "k" : String(v));
  const short = (text, n) => (String(text).length > n ? String(text).slice(0, n - 1) + "\u2026" : String(text));
  const sum = (rows, key) => rows.reduce((a, r) => a + (num(r[key]) ? r[key] : 0), 0);

  // -- data -----------------------------------------------------------------------------
  async function fetchJson(path) {
    const response = await fetch(path, { cache: "no-store" });
    if (!response.ok) throw new Error(path + ": " + response.status);
    return response.json();
  }
  async function loadData() {
    if (embedded) return embedded;
    return fetchJson("/api/data");
  }
  async function loadSession(id) {
    if (embedded) return (embedded.all_sessions || {})[id] || null;
    try {
      return await fetchJson("/api/session?id=" + encodeURIComponent(id));
    } catch (e) {
      return null;
    }
  }
  function route() {
    const hash = location.hash.slice(1);
    const params = new URLSearchParams(hash);
    return params.get("session");
  }

  // -- layout ---------------------------------------------------------------------------
  const liveBadge = el("span", { class: "live" }, embedded ? "static export" : "connecting");
  const filterBox = el("input", { type: "search", placeholder: "filter runs (engine, task, model)" });
  filterBox.addEventListener("input", () => { state.filter = filterBox.value.toLowerCase(); render(); });
  const home = el("a", { href: "#" }, "runs");
  const header = el("header", {}, el("h1", {}, "agentrun view"), home, liveBadge, filterBox);
  const main = el("main", { id: "main" });
  document.body.append(header, main);

  async function refresh() {
    const data = await loadData();
    state.data = data;
    state.version = data.version;
    const id = route();
    state.session = id ? await loadSession(id) : null;
    render();
  }

  function render() {
    const keepY = window.scrollY;
    main.replaceChildren();
    main.dataset.version = String(state.version);
    const id = route();
    if (id) renderSession(id);
    else renderRuns();
    window.scrollTo(0, keepY);
  }

  // -- runs -----------------------------------------------------------------------------
  const COLUMNS = [
    ["task", "task", (r) => r.task],
    ["engine", "engine", (r) => r.engine],
    ["model", "model", (r) => r.model || "-"],
    ["ok", "ok", (r) => (r.running ? "running" : r.pending ? "no result yet" : r.ok ? "yes" : "no")],
    ["check", "check", (r) => r.check || "-"],
    ["turns", "turns", (r) => String(r.turns), true],
    ["tool_calls", "tools", (r) => String(r.tool_calls), true],
    ["input_tokens", "input", (r) => tokens(r.input_tokens), true],
    ["cache_read_tokens", "cache read", (r) => tokens(r.cache_read_tokens), true],
    ["output_tokens", "output", (r) => tokens(r.output_tokens), true],
    ["cost_usd", "cost", (r) => money(r.cost_usd), true],
    ["duration_s", "wall", (r) => secs(r.duration_s), true],
    ["context_peak", "context peak", (r) => pct(r.context_peak), true],
    ["kind", "from", (r) => r.kind],
  ];

  function filtered(runs) {
    if (!state.filter) return runs;
    return runs.filter((r) =>
      [r.task, r.engine, r.model, r.kind, r.error].some((v) => String(v || "").toLowerCase().includes(state.filter)));
  }

  function renderRuns() {
    const data = state.data;
    const runs = filtered(data.runs || []);
    if ((data.problems || []).length) {
      main.append(el("section", {}, el("h2", {}, "Could not read"),
        el("div", { class: "problems" }, data.problems.join("\n"))));
    }
    if (!runs.length) {
      main.append(el("section", { id: "empty" }, el("h2", {}, "No runs"),
        el("p", { class: "muted" }, "Nothing to show yet: give agentrun view journals, fleet results (JSON lines), a compare report or an ATIF trajectory.")));
      return;
    }
    const charts = el("section", { id: "charts" }, el("h2", {}, "Charts"));
    const row = el("div", { class: "charts" });
    row.append(barChart("Cost per task (USD)", runs, (r) => r.cost_usd, money, "chart-cost"));
    row.append(barChart("Wall time per task (s)", runs, (r) => r.duration_s, secs, "chart-wall"));
    row.append(tokenChart(runs));
    charts.append(row);
    main.append(charts);
    const engines = [...new Set(runs.map((r) => r.engine))].sort();
    for (const engine of engines) main.append(engineTable(engine, runs.filter((r) => r.engine === engine)));
  }

  function engineTable(engine, rows) {
    const ended = rows.filter((r) => !r.running && !r.pending);
    const running = rows.length - ended.length;
    const passed = ended.filter((r) => r.ok).length;
    const peaks = rows.map((r) => r.context_peak).filter(num);
    const stats = el("div", { class: "stats" },
      el("span", { class: "pass-rate" }, "pass rate ", el("b", {}, ended.length ? `${passed}/${ended.length} (${pct(passed / ended.length)})` : "-")),
      running ? el("span", { class: "running" }, "running ", el("b", {}, String(running))) : null,
      el("span", {}, "cost ", el("b", {}, money(sum(rows, "cost_usd")))),
      el("span", {}, "tokens in ", el("b", {}, tokens(sum(rows, "input_tokens") + sum(rows, "cache_read_tokens") + sum(rows, "cache_write_tokens")))),
      el("span", {}, "out ", el("b", {}, tokens(sum(rows, "output_tokens")))),
      el("span", {}, "wall ", el("b", {}, secs(sum(rows, "duration_s")))),
      el("span", {}, "turns ", el("b", {}, String(sum(rows, "turns")))),
      el("span", {}, "context peak ", el("b", {}, peaks.length ? pct(Math.max(...peaks)) : "-")));
    const sort = state.sort[engine] || { key: null, asc: true };
    const sorted = rows.slice();
    if (sort.key) {
      sorted.sort((a, b) => {
        const x = a[sort.key], y = b[sort.key];
        const cmp = num(x) || num(y) ? (num(x) ? x : -Infinity) - (num(y) ? y : -Infinity)
          : String(x ?? "").localeCompare(String(y ?? ""));
        return sort.asc ? cmp : -cmp;
      });
    }
    const head = el("tr", {}, ...COLUMNS.map(([key, label, , numeric]) => {
      const cls = (numeric ? "num " : "") + (sort.key === key ? "sorted" + (sort.asc ? " asc" : "") : "");
      return el("th", { class: cls, "data-key": key, onclick: () => {
        state.sort[engine] = { key, asc: sort.key === key ? !sort.asc : true };
        render();
      } }, label);
    }));
    const body = sorted.map((r) => {
      const cells = COLUMNS.map(([key, , show, numeric]) => {
        const cell = el("td", { class: numeric ? "num" : "" });
        if (key === "task" && r.session) {
          cell.append(el("a", { href: "#session=" + encodeURIComponent(r.session) }, show(r)));
        } else if (key === "ok") {
          cell.append(el("span", { class: r.running || r.pending ? "muted" : r.ok ? "ok" : "bad", title: r.error || "" }, show(r)));
        } else {
          cell.textContent = show(r);
        }
        return cell;
      });
      return el("tr", { class: "run", "data-engine": r.engine }, ...cells);
    });
    return el("section", { class: "engine", "data-engine": engine },
      el("h2", {}, engine), stats, el("table", {}, el("thead", {}, head), el("tbody", {}, ...body)));
  }

  function chartBox(title, id) {
    return el("div", { class: "chart", id }, el("h3", {}, title));
  }

  function barChart(title, runs, value, format, id) {
    const box = chartBox(title, id);
    const rows = runs.filter((r) => num(value(r))).slice(0, 60);
    if (!rows.length) { box.append(el("p", { class: "muted" }, "no figures")); return box; }
    const width = 460, bar = 16, gap = 4, left = 140, height = rows.length * (bar + gap) + 10;
    const max = Math.max(...rows.map(value)) || 1;
    const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img" });
    const engines = [...new Set(runs.map((r) => r.engine))].sort();
    rows.forEach((r, i) => {
      const y = 5 + i * (bar + gap);
      const w = Math.max(1, ((width - left - 70) * value(r)) / max);
      chart.append(svg("text", { x: left - 6, y: y + bar - 4, "text-anchor": "end" }, short(r.task, 24)));
      const rect = svg("rect", { x: left, y, width: w, height: bar, rx: 2,
        fill: COLORS[engines.indexOf(r.engine) % COLORS.length] });
      rect.append(svg("title", {}, `${r.task} (${r.engine}): ${format(value(r))}`));
      chart.append(rect);
      chart.append(svg("text", { x: left + w + 4, y: y + bar - 4 }, format(value(r))));
    });
    box.append(chart, legend(engines));
    return box;
  }

  function legend(names) {
    return el("div", { class: "legend" }, ...names.map((name, i) =>
      el("span", {}, el("span", { class: "swatch", style: `background:${COLORS[i % COLORS.length]}` }), name)));
  }

  function tokenChart(runs) {
    const box = chartBox("Tokens by kind, per engine", "chart-tokens");
    const kinds = ["input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens", "thinking_tokens"];
    const engines = [...new Set(runs.map((r) => r.engine))].sort();
    const totals = engines.map((e) => kinds.map((k) => sum(runs.filter((r) => r.engine === e), k)));
    const max = Math.max(1, ...totals.map((t) => t.reduce((a, b) => a + b, 0)));
    const width = 460, bar = 20, gap = 8, left = 110, height = engines.length * (bar + gap) + 10;
    const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img" });
    engines.forEach((engine, i) => {
      const y = 5 + i * (bar + gap);
      chart.append(svg("text", { x: left - 6, y: y + bar - 6, "text-anchor": "end" }, engine.slice(0, 20)));
      let x = left;
      totals[i].forEach((value, k) => {
        const w = ((width - left - 60) * value) / max;
        if (w <= 0) return;
        const rect = svg("rect", { x, y, width: w, height: bar, fill: COLORS[k] });
        rect.append(svg("title", {}, `${engine} ${kinds[k].replace("_tokens", "")}: ${value}`));
        chart.append(rect);
        x += w;
      });
      chart.append(svg("text", { x: x + 4, y: y + bar - 6 }, tokens(totals[i].reduce((a, b) => a + b, 0))));
    });
    box.append(chart, legend(kinds.map((k) => k.replace("_tokens", "").replace("_", " "))));
    return box;
  }

  // -- a session --------------------------------------------------------------------------
  function renderSession(id) {
    main.append(el("a", { class: "back", href: "#" }, "\u2190 all runs"));
    const s = state.session;
    if (!s || s.id !== id) {
      main.append(el("section", {}, el("h2", {}, "Not found"), el("p", {}, "No session " + id)));
      return;
    }
    const row = (state.data.runs || []).find((r) => r.session === s.id && r.task !== s.title);
    const top = el("section", { id: "session" }, el("h2", {}, row ? `${row.task} \u00b7 ${s.title}` : s.title),
      el("div", { class: "stats" },
        el("span", {}, "engine ", el("b", {}, s.engine)),
        el("span", {}, "model ", el("b", {}, s.model || "-")),
        el("span", {}, "items ", el("b", {}, String(s.items.length))),
        s.closed === false ? el("span", { class: "live on" }, "running") : null));
    if (s.context && s.context.length) top.append(contextChart(s.context));
    main.append(top);
    const conv = el("div", { class: "conv", id: "conversation" });
    const items = s.items.slice(0, state.shown);
    for (const item of items) conv.append(renderItem(item));
    const left = s.items.length - items.length;
    main.append(el("section", {}, conv));
    if (left > 0) {
      main.append(el("button", { id: "more", onclick: () => { state.shown += PAGE; render(); } },
        `Show ${Math.min(PAGE, left)} more (${left} not shown)`));
    }
    if (s.truncated) main.append(el("p", { class: "muted" }, `${s.truncated} further items were left out.`));
  }

  function contextChart(points) {
    const box = chartBox("Context fill after each model call", "chart-context");
    const width = 1000, height = 150, pad = 34;
    const values = points.map((p) => (num(p[1]) ? p[1] : null));
    const max = Math.max(0.05, ...values.filter(num));
    const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img" });
    chart.append(svg("line", { x1: pad, y1: height - pad, x2: width - 5, y2: height - pad, stroke: "#d9dee7" }));
    chart.append(svg("text", { x: 2, y: 12 }, pct(max)));
    chart.append(svg("text", { x: 2, y: height - pad }, "0%"));
    const step = (width - pad - 10) / Math.max(1, points.length - 1);
    const path = [];
    values.forEach((v, i) => {
      if (v === null) return;
      const x = pad + i * step, y = height - pad - ((height - pad - 10) * v) / max;
      path.push(`${path.length ? "L" : "M"}${x.toFixed(1)},${y.toFixed(1)}`);
      if (points.length <= 300) {
        const dot = svg("circle", { cx: x, cy: y, r: 3, fill: "#3559c7" });
        dot.append(svg("title", {}, `turn ${points[i][0]}: ${pct(v)}`));
        chart.append(dot);
      }
    });
    chart.append(svg("path", { d: path.join(" "), fill: "none", stroke: "#3559c7", "stroke-width": 2 }));
    chart.append(svg("text", { x: pad, y: height - 8 }, "model calls \u2192"));
    box.append(chart);
    return box;
  }

  function pre(text) { return el("pre", {}, text || ""); }

  function renderItem(item) {
    const turn = item.turn ? `turn ${item.turn} \u00b7 ` : "";
    switch (item.k) {
      case "prompt":
        return el("div", { class: "item prompt" }, el("div", { class: "label" }, turn + "prompt"), el("div", { class: "body" }, item.text));
      case "text":
        return el("div", { class: "item text" }, el("div", { class: "label" }, turn + "agent"), el("div", { class: "body" }, item.text));
      case "thinking":
        return el("details", { class: "item thinking" }, el("summary", { class: "label" }, turn + "thinking"), el("div", { class: "body" }, item.text));
      case "tool": {
        const node = el("div", { class: "item tool" + (item.is_error ? " err" : ""), "data-tool": item.name },
          el("div", { class: "label" }, `${turn}tool call \u00b7 ${item.name}${item.is_error ? " \u00b7 error" : ""}`),
          el("details", { open: true }, el("summary", {}, "input"), pre(item.input)));
        node.append(item.output === null || item.output === undefined
          ? el("div", { class: "muted" }, "no result yet")
          : el("details", { open: true, class: "result" }, el("summary", {}, "result"), pre(item.output)));
        return node;
      }
      case "permission":
        return el("div", { class: "item permission" }, el("div", { class: "label" }, turn + "permission " + item.decision),
          el("div", { class: "body" }, item.tool + (item.reason ? ": " + item.reason : "")));
      case "question":
        return el("div", { class: "item permission" }, el("div", { class: "label" }, turn + "question"), el("div", { class: "body" }, item.text));
      case "error":
        return el("div", { class: "item error" }, el("div", { class: "label" }, turn + "error" + (item.code ? " \u00b7 " + item.code : "")),
          el("div", { class: "body" }, item.text));
      case "context": {
        const width = num(item.fraction) ? Math.min(100, 100 * item.fraction) : 0;
        return el("div", { class: "gauge", "data-k": "context" }, "context",
          el("span", { class: "bar" }, el("span", { class: "fill", style: `width:${width.toFixed(1)}%;display:block` })),
          `${pct(item.fraction)} (${tokens(item.used)} of ${tokens(item.size)})`);
      }
      case "usage": {
        const u = item.usage || {};
        const node = el("div", { class: "item usage" }, el("div", { class: "label" }, turn + "turn ended" + (item.ok ? "" : " \u00b7 failed")),
          el("div", { class: "stats" },
            el("span", {}, "cost ", el("b", {}, money(item.cost_usd))),
            el("span", {}, "in ", el("b", {}, tokens(u.input_tokens))),
            el("span", {}, "cache read ", el("b", {}, tokens(u.cache_read_tokens))),
            el("span", {}, "cache write ", el("b", {}, tokens(u.cache_write_tokens))),
            el("span", {}, "out ", el("b", {}, tokens(u.output_tokens))),
            el("span", {}, "wall ", el("b", {}, secs(item.duration_s))),
            el("span", {}, "stop ", el("b", {}, item.stop_reason || "-"))));
        if (item.ledger) {
          const same = item.ledger.calls_output_tokens === item.ledger.turn_output_tokens;
          node.append(el("div", { class: "check " + (same ? "ok" : "bad") },
            `ledger: the model calls' output tokens (${item.ledger.calls_output_tokens}) ${same ? "match" : "differ from"} the turn's (${item.ledger.turn_output_tokens})`));
        }
        for (const e of item.errors || []) node.append(el("div", { class: "bad" }, e));
        return node;
      }
      case "diff": {
        const list = (cls, sign, paths) => el("ul", {}, ...paths.map((p) => el("li", { class: cls }, sign + " " + p)));
        const node = el("div", { class: "item diff" }, el("div", { class: "label" }, "workspace changes"));
        if (!item.added.length && !item.modified.length && !item.deleted.length) node.append(el("div", { class: "muted" }, "no file changed"));
        node.append(list("a", "+", item.added), list("m", "~", item.modified), list("d", "-", item.deleted));
        if (item.more) node.append(el("div", { class: "muted" }, `${item.more} more`));
        for (const d of item.diffs || []) {
          node.append(el("div", { class: "file" }, (d.status === "added" ? "+ " : "~ ") + d.path));
          if (d.skipped) node.append(el("div", { class: "muted" }, "not diffed: " + d.skipped));
          else node.append(el("pre", { class: "patch" }, d.diff));
        }
        return node;
      }
      default:
        return el("div", { class: "item" }, el("pre", {}, JSON.stringify(item)));
    }
  }

  // -- live -------------------------------------------------------------------------------
  window.addEventListener("hashchange", () => { state.shown = PAGE; refresh(); });
  refresh().catch((e) => { main.replaceChildren(el("section", {}, el("h2", {}, "Could not load"), String(e))); });
  if (!embedded && window.EventSource) {
    const events = new EventSource("/events");
    events.addEventListener("open", () => { liveBadge.textContent = "live"; liveBadge.classList.add("on"); });
    events.addEventListener("error", () => { liveBadge.textContent = "disconnected"; liveBadge.classList.remove("on"); });
    events.addEventListener("version", (event) => {
      const version = JSON.parse(event.data).version;
      if (version !== state.version) refresh();
    });
  }
})();
