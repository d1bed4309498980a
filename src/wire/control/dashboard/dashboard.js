// Wire dashboard: a static page over the control plane's JSON API (no build step).
//
// Reads GET /v1/flows, /v1/flows/{id}, /v1/flows/{id}/history and /v1/flows/{id}/graph
// every REFRESH_MS, /v1/flows/{id}/state/{step}?key=K when asked (a keyed step's state for one
// key: record content, so only with the token; a stateful node of the graph picks the step),
// and /v1/flows/{id}/samples (recent dead letters and late events: record
// content, so only with the token); pause / resume send PATCH with the bearer token typed into the page
// (kept in this tab's sessionStorage, sent only to this control plane). Plots: uPlot.
// `wire report` inlines this script with the data in <script id="wire-data">: the same
// page, read once from that data, read only.
(() => {
  "use strict";

  const REFRESH_MS = 1000;
  const END = 2 ** 62; // a watermark at or above this is "end of input" (2**63 - 1 in JSON)
  const TOKEN_KEY = "wire-token";
  const SVG = "http://www.w3.org/2000/svg";
  const COLORS = ["#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#0891b2", "#db2777",
                  "#65a30d", "#4b5563", "#ea580c"];
  const BREAKER_LEVEL = { closed: 0, half_open: 1, open: 2 };

  const state = {
    flow: null, // the selected flow's id
    token: sessionStorage.getItem(TOKEN_KEY) || "",
    tokenChecked: false, // true once the control plane accepted state.token (GET /v1/token)
    minutes: 15,
    plots: {}, // uPlot instances by name (read by the browser tests)
    graphFor: null,
    lastStatus: null,
  };
  window.wireDashboard = state;

  const $ = (id) => document.getElementById(id);
  const dataTag = $("wire-data");
  const STATIC = dataTag ? JSON.parse(dataTag.textContent) : null;

  // A token may come in the URL's fragment (#token=...): never sent to a server; moved
  // into sessionStorage and removed from the address bar.
  if (location.hash.startsWith("#token=")) {
    state.token = decodeURIComponent(location.hash.slice("#token=".length));
    sessionStorage.setItem(TOKEN_KEY, state.token);
    history.replaceState(null, "", location.pathname + location.search);
  }

  class ApiError extends Error {
    constructor(status, detail) {
      super(`${status} ${detail}`);
      this.status = status;
      this.detail = detail;
    }
  }

  async function api(path, options = {}) {
    if (STATIC) return fromReport(path, options);
    const { token: given, ...rest } = options;
    const token = given ?? state.token;
    const headers = { ...(rest.headers || {}) };
    if (token) headers.Authorization = `Bearer ${token}`;
    const response = await fetch(path, { ...rest, headers, cache: "no-store" });
    let body = null;
    try {
      body = await response.json();
    } catch (_) {
      body = null;
    }
    if (!response.ok) {
      const detail = body && body.detail !== undefined
        ? (typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail))
        : response.statusText;
      throw new ApiError(response.status, detail);
    }
    return body;
  }

  function fromReport(path, options) {
    if (options.method && options.method !== "GET") throw new ApiError(405, "a report is read only");
    if (path === "/v1/flows") return [STATIC.summary];
    if (path.includes("/history")) return STATIC.history;
    if (path.endsWith("/graph")) return STATIC.graph;
    if (path.endsWith("/samples")) return STATIC.samples || { size: 0, dead_letters: [], late: [] };
    return STATIC.status;
  }

  function say(text, kind) {
    const m = $("message");
    m.textContent = text;
    m.className = kind || "";
  }

  function loadError(text) {
    $("load-error").textContent = text;
  }

  function el(tag, attrs = {}, text) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function svg(tag, attrs = {}, text) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // ---- formatting ---------------------------------------------------------------

  const num = (n) => (n === null || n === undefined ? "-" : Number(n).toLocaleString("en-US"));

  function isRealTime(ms) {
    return ms > 1e11; // after 1973: show as a date, else as plain ms (test data starts at 0)
  }

  function fmtEventTime(ms) {
    if (ms === null || ms === undefined) return "none yet";
    if (ms >= END) return "end of input";
    if (!isRealTime(ms)) return `${num(ms)} ms`;
    return new Date(ms).toISOString().replace("T", " ").replace(".000Z", "Z");
  }

  function fmtLag(ms) {
    if (ms === null || ms === undefined) return "-";
    if (ms < 10000) return `${num(ms)} ms`;
    if (ms < 3600000) return `${(ms / 60000).toFixed(1)} min`;
    return `${(ms / 3600000).toFixed(1)} h`;
  }

  const plural = (n, word) => (n === 1 ? word : `${word}s`);

  const sum = (obj) => Object.values(obj || {}).reduce((a, b) => a + b, 0);

  // ---- flow list and status -------------------------------------------------------

  function renderFlows(flows) {
    const nav = $("flows");
    nav.replaceChildren();
    for (const f of flows) {
      const b = el("button", { type: "button", "data-flow": f.id }, `${f.id} · ${f.status}`);
      if (f.id === state.flow) b.classList.add("selected");
      b.addEventListener("click", () => {
        state.flow = f.id;
        refresh();
      });
      nav.append(b);
    }
  }

  // A source's state agrees with its flow's: a flow that is not running (stopped, failing,
  // starting, or a report's finished / stopped) shows that on every source too.
  function sourceState(s, src) {
    if (src.state) return src.state;
    if (["stopped", "failing", "starting", "finished"].includes(s.status)) return s.status;
    return src.paused ? "paused" : "running";
  }

  function renderStatus(s) {
    state.lastStatus = s;
    $("flow").hidden = false;
    $("flow-id").textContent = s.id;
    const badge = $("flow-status");
    badge.textContent = s.status;
    badge.className = `status status-${s.status}`;
    $("stat-epochs").textContent = num(s.epochs);
    $("stat-events").textContent = num(s.input_events);
    $("stat-rate").textContent = s.input_rate === null ? "-" : num(Math.round(s.input_rate));
    $("stat-rows").textContent = num(sum(s.rows_written));
    $("stat-late").textContent = num(sum(s.late));
    $("stat-malformed").textContent = num(sum(s.malformed));
    $("flow-error").textContent = s.error ? `error: ${s.error}` : "";
    const body = $("sources").tBodies[0];
    body.replaceChildren();
    for (const [step, src] of Object.entries(s.sources)) {
      const tr = el("tr", { "data-source": step });
      tr.append(el("td", {}, step), el("td", { class: "source-state" }, sourceState(s, src)),
                el("td", {}, fmtEventTime(src.watermark)), el("td", {}, fmtLag(src.lag_ms)));
      const td = el("td");
      const pause = el("button", { type: "button", class: "pause-source" }, "Pause");
      const resume = el("button", { type: "button", class: "resume-source" }, "Resume");
      pause.addEventListener("click", () => change(step, "paused"));
      resume.addEventListener("click", () => change(step, "running"));
      td.append(pause, resume);
      tr.append(td);
      body.append(tr);
    }
    markGraph(s);
  }

  async function change(connector, to) {
    if (!state.flow) return;
    let path = `/v1/flows/${encodeURIComponent(state.flow)}`;
    if (connector) path += `/connectors/${encodeURIComponent(connector)}`;
    const what = connector ? `source ${connector}` : `flow ${state.flow}`;
    const verb = to === "paused" ? "pause" : "resume";
    try {
      const s = await api(path, {
        method: "PATCH",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ status: to }),
      });
      say(`${what}: ${to === "paused" ? "paused" : "resumed"}`, "ok");
      renderStatus(s);
    } catch (e) {
      const hint = e.status === 401 ? " (type the control plane's token above)" : "";
      say(`refused: ${verb} ${what}: ${e.message}${hint}`, "error");
    }
  }

  // ---- recent dead letters and late events ----------------------------------------

  function fmtClock(ms) {
    return new Date(ms).toISOString().replace("T", " ").replace("Z", "");
  }

  function fillRows(table, items, cells, empty) {
    const body = $(table).tBodies[0];
    body.replaceChildren();
    if (!items.length) {
      const tr = el("tr");
      tr.append(el("td", { class: "empty", colspan: $(table).tHead.rows[0].cells.length }, empty));
      body.append(tr);
      return;
    }
    for (const item of items) {
      const tr = el("tr", { class: "sample" });
      for (const [cls, text] of cells(item)) tr.append(el("td", { class: cls }, text ?? "-"));
      body.append(tr);
    }
  }

  function renderSamples(samples, note) {
    $("samples-note").textContent = note || "";
    fillRows("dead-letters", samples.dead_letters, (d) => [
      ["time", fmtClock(d.processing_time)], ["epoch", String(d.epoch)], ["step", d.step],
      ["location", d.location], ["reason", d.reason], ["record", d.record],
    ], note ? "-" : "no dead letter yet");
    fillRows("late-events", samples.late, (d) => [
      ["time", fmtClock(d.processing_time)], ["epoch", String(d.epoch)], ["step", d.step],
      ["event-time", fmtEventTime(d.event_time)], ["watermark", fmtEventTime(d.watermark)],
      ["reason", d.reason], ["record", d.record],
    ], note ? "-" : "no late event yet");
  }

  const NO_SAMPLES = { dead_letters: [], late: [] };
  const SAMPLES_NEED_TOKEN = "the samples show record content: type the token above to see them";

  async function loadSamples(id) {
    if (!STATIC && !state.token) {
      renderSamples(NO_SAMPLES, SAMPLES_NEED_TOKEN);
      return;
    }
    try {
      renderSamples(await api(`/v1/flows/${id}/samples`));
    } catch (e) {
      renderSamples(NO_SAMPLES, e.status === 401 ? `${SAMPLES_NEED_TOKEN} (401: ${e.detail})`
                                                 : `cannot read the samples: ${e.message}`);
    }
  }

  // ---- operator graph (plain SVG, layered by longest path from a source) ----------

  const NODE_W = 190;
  const NODE_H = 54;
  const GAP_X = 56;
  const GAP_Y = 16;

  function renderGraph(g) {
    const root = $("graph");
    root.replaceChildren();
    const preds = {};
    for (const e of g.edges) (preds[e.target] ||= []).push(e.source);
    const depth = {};
    const depthOf = (step, seen) => {
      if (depth[step] !== undefined) return depth[step];
      if (seen.has(step)) return 0;
      seen.add(step);
      const ups = preds[step] || [];
      depth[step] = ups.length ? 1 + Math.max(...ups.map((u) => depthOf(u, seen))) : 0;
      return depth[step];
    };
    const rows = {};
    const pos = {};
    for (const n of g.nodes) {
      const d = depthOf(n.step, new Set());
      const r = (rows[d] = (rows[d] ?? -1) + 1);
      pos[n.step] = { x: 8 + d * (NODE_W + GAP_X), y: 8 + r * (NODE_H + GAP_Y) };
    }
    const width = 16 + (Math.max(0, ...Object.values(depth)) + 1) * (NODE_W + GAP_X) - GAP_X;
    const height = 16 + (Math.max(0, ...Object.values(rows)) + 1) * (NODE_H + GAP_Y) - GAP_Y;
    root.setAttribute("width", width);
    root.setAttribute("height", height);
    root.setAttribute("viewBox", `0 0 ${width} ${height}`);
    const defs = svg("defs");
    const marker = svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5,
                                   markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" });
    marker.append(svg("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#94a3b8" }));
    defs.append(marker);
    root.append(defs);
    for (const e of g.edges) {
      const a = pos[e.source];
      const b = pos[e.target];
      if (!a || !b) continue;
      const x1 = a.x + NODE_W;
      const y1 = a.y + NODE_H / 2;
      const x2 = b.x;
      const y2 = b.y + NODE_H / 2;
      const mx = (x1 + x2) / 2;
      const side = e.port !== "out";
      const path = svg("path", { class: side ? "edge side" : "edge", "marker-end": "url(#arrow)",
                                 d: `M ${x1} ${y1} C ${mx} ${y1}, ${mx} ${y2}, ${x2} ${y2}`,
                                 "data-edge": `${e.source}->${e.target}` });
      root.append(path);
      if (side) root.append(svg("text", { class: "port", x: mx - 18, y: (y1 + y2) / 2 - 4 }, e.port));
    }
    for (const n of g.nodes) {
      const p = pos[n.step];
      const group = svg("g", { class: `node kind-${n.kind}`, "data-step": n.step,
                               transform: `translate(${p.x},${p.y})` });
      group.append(svg("title", {}, `${n.step} (${n.kind}) ${n.detail}`));
      group.append(svg("rect", { width: NODE_W, height: NODE_H, rx: 5 }));
      group.append(svg("text", { class: "step", x: 8, y: 16 }, n.step === "*" ? "* every step" : n.step));
      const detail = `${n.kind}${n.detail ? ": " + n.detail : ""}`;
      group.append(svg("text", { class: "detail", x: 8, y: 31 },
                       detail.length > 30 ? detail.slice(0, 29) + "…" : detail));
      group.append(svg("text", { class: "live", x: 8, y: 46 }, ""));
      if (STATEFUL.has(n.kind)) {  // a keyed step: a click picks it for "State by key"
        group.classList.add("stateful");
        group.addEventListener("click", () => pickState(n.step));
      }
      root.append(group);
    }
    fillStateSteps(g);
  }

  // ---- state by key (GET /v1/flows/{id}/state/{step}?key=K) -------------------------

  const STATEFUL = new Set(["window", "join", "process"]);
  const STATE_NEEDS_TOKEN = "state holds record content: type the token above to read it";

  function fillStateSteps(g) {
    const select = $("state-step");
    const steps = g.nodes.filter((n) => STATEFUL.has(n.kind)).map((n) => n.step);
    select.replaceChildren(...steps.map((s) => el("option", { value: s }, s)));
    $("state").hidden = Boolean(STATIC) || !steps.length;
  }

  function pickState(step) {
    if (STATIC) return;
    $("state-step").value = step;
    $("state").scrollIntoView({ block: "nearest" });
    $("state-key").focus();
  }

  function cellText(v) {
    if (v === null || v === undefined) return "-";
    return typeof v === "object" ? JSON.stringify(v) : String(v);
  }

  async function readState(ev) {
    ev.preventDefault();
    const step = $("state-step").value;
    const key = $("state-key").value;
    const head = $("state-rows").tHead.rows[0];
    const body = $("state-rows").tBodies[0];
    head.replaceChildren();
    body.replaceChildren();
    if (!state.token) {
      $("state-note").textContent = STATE_NEEDS_TOKEN;
      return;
    }
    const path = `/v1/flows/${encodeURIComponent(state.flow)}/state/${encodeURIComponent(step)}` +
      `?key=${encodeURIComponent(key)}`;
    try {
      const s = await api(path);
      $("state-note").textContent = `${s.kind} ${s.step}, key ${s.key}: ${s.rows.length} ` +
        `${plural(s.rows.length, "row")} at epoch ${s.epoch}` +
        (s.key_group === null ? "" : ` (key group ${s.key_group})`) +
        `; input watermark ${fmtEventTime(s.input_watermark)}, output watermark ${fmtEventTime(s.output_watermark)}`;
      for (const c of s.columns) head.append(el("th", {}, c));
      for (const r of s.rows) {
        const tr = el("tr", { class: "state-row" });
        for (const c of s.columns) tr.append(el("td", {}, cellText(r[c])));
        body.append(tr);
      }
    } catch (e) {
      $("state-note").textContent = e.status === 401 ? `${STATE_NEEDS_TOKEN} (401: ${e.detail})`
                                                     : `cannot read the state: ${e.detail ?? e.message}`;
    }
  }

  // Live figures on the graph's nodes: watermark, late count, rows written, paused.
  function markGraph(s) {
    for (const g of document.querySelectorAll("#graph g.node")) {
      const step = g.getAttribute("data-step");
      const marks = s.watermarks[step] || {};
      let live = "";
      if (s.sources[step]) {
        live = `wm ${fmtEventTime(s.sources[step].watermark)}`;
        g.classList.toggle("paused", s.sources[step].paused);
      } else if (marks.output_watermark !== undefined) {
        live = `out wm ${fmtEventTime(marks.output_watermark)}`;
      } else if (s.rows_written[step] !== undefined) {
        live = `${num(s.rows_written[step])} ${plural(s.rows_written[step], "row")}`;
      }
      if (s.late[step]) live += ` · ${num(s.late[step])} late`;
      g.querySelector("text.live").textContent = live;
    }
  }

  // ---- plots --------------------------------------------------------------------

  // Axis label widths, measured in the axis's own font, so no label is clipped.
  const MEASURE = document.createElement("canvas").getContext("2d");

  function labelWidth(u, axisIdx, values) {
    const font = u.axes[axisIdx].font;
    MEASURE.font = Array.isArray(font) ? font[0] : font;
    const ratio = (typeof uPlot !== "undefined" && uPlot.pxRatio) || window.devicePixelRatio || 1;
    let width = 0;
    for (const v of values || []) {
      for (const line of String(v).split("\n")) width = Math.max(width, MEASURE.measureText(line).width);
    }
    return width / ratio;
  }

  // uPlot's axis `size` hook: the widest tick label, the tick and the gap, and a margin.
  const fitAxis = (u, values, axisIdx) => Math.ceil(labelWidth(u, axisIdx, values)) + 24;

  const X_TICK_SPACE = 110; // px between time ticks: room for "12:34:56" / "11/27" and a gap

  function plotWidth(box) {
    return Math.max(300, box.clientWidth || 460);
  }

  // Draw (or update) the plot `name` in #plot-<name>: series = [[label, values], ...].
  function plot(name, t, series, extra = {}) {
    const box = $(`plot-${name}`);
    const labels = series.map(([label]) => label).join("\n");
    let u = state.plots[name];
    const any = series.some(([, values]) => values.some((v) => v !== null && v !== undefined));
    if (!any || !t.length) {
      if (u) u.destroy();
      delete state.plots[name];
      box.replaceChildren(el("div", { class: "empty" }, extra.empty || "no data yet"));
      return;
    }
    const data = [t, ...series.map(([, values]) => values)];
    if (u && u.wireLabels === labels) {
      u.setData(data);
      return;
    }
    if (u) u.destroy();
    box.replaceChildren();
    const opts = {
      width: plotWidth(box),
      height: 220,
      ms: 1, // x values are ms since the Unix epoch
      scales: { x: { time: true }, ...(extra.scales || {}) },
      legend: { live: true },
      series: [
        { label: "time" },
        ...series.map(([label], i) => ({
          label,
          stroke: COLORS[i % COLORS.length],
          width: 1.5,
          spanGaps: extra.spanGaps ?? false,
          points: { show: extra.points ?? false, size: 4 },
          paths: extra.stepped ? uPlot.paths.stepped({ align: 1 }) : undefined,
          value: extra.value ? (_, v) => extra.value(v) : undefined,
        })),
      ],
      axes: [{ space: X_TICK_SPACE }, { size: fitAxis, values: extra.axisValues }],
    };
    u = new uPlot(opts, data, box);
    u.wireLabels = labels;
    state.plots[name] = u;
  }

  const wmValue = (v) => (v === null || v === undefined || v >= END ? null : v);

  function renderPlots(h) {
    const t = h.t;
    const marks = [];
    for (const [step, gauges] of Object.entries(h.watermarks)) {
      for (const [gauge, values] of Object.entries(gauges)) {
        marks.push([`${step} ${gauge}`, values.map(wmValue)]);
      }
    }
    const realTime = marks.some(([, vs]) => vs.some((v) => v !== null && isRealTime(v)));
    plot("watermarks", t, marks, {
      axisValues: (_, splits) => splits.map((v) => (realTime ? fmtEventTime(v) : num(v))),
      value: (v) => (v === null ? "-" : fmtEventTime(v)),
      empty: "no watermark yet",
    });
    plot("lag", t, Object.entries(h.lag_ms).map(([step, vs]) => [`${step} lag ms`, vs]),
         { empty: "no source reports its lag (max_event_time)" });
    plot("throughput", t, [["events in/s", h.events_in_per_s], ["rows out/s", h.rows_out_per_s]]);
    plot("epochs", t, [["epoch ms", h.epoch_ms]], { spanGaps: true, points: true });
    const counts = [
      ...Object.entries(h.late).map(([step, vs]) => [`${step} late`, vs]),
      ...Object.entries(h.malformed).map(([step, vs]) => [`${step} dead letters`, vs]),
    ];
    plot("late", t, counts, { empty: "no late events and no dead letters" });
    const names = ["closed", "half_open", "open"];
    plot("breakers", t,
         Object.entries(h.breakers).map(([sink, vs]) => [sink, vs.map((v) => BREAKER_LEVEL[v] ?? null)]),
         {
           stepped: true,
           scales: { y: { range: [-0.2, 2.2] } },
           axisValues: (_, splits) => splits.map((v) => names[v] ?? ""),
           value: (v) => (v === null ? "-" : names[v]),
           empty: "no guarded sink (wire.sinks.guarded)",
         });
  }

  window.addEventListener("resize", () => {
    for (const [name, u] of Object.entries(state.plots)) {
      u.setSize({ width: plotWidth($(`plot-${name}`)), height: 220 });
    }
  });

  // ---- refresh loop ---------------------------------------------------------------

  async function refresh() {
    try {
      const flows = await api("/v1/flows");
      if (!flows.some((f) => f.id === state.flow)) state.flow = flows.length ? flows[0].id : null;
      renderFlows(flows);
      if (!state.flow) {
        $("flow").hidden = true;
        loadError("no flow is registered with this control plane (yet: a run registers its flow when it starts)");
        return;
      }
      const id = encodeURIComponent(state.flow);
      if (state.graphFor !== state.flow) {
        renderGraph(await api(`/v1/flows/${id}/graph`));
        state.graphFor = state.flow;
      }
      const [status, hist] = await Promise.all([
        api(`/v1/flows/${id}`),
        api(`/v1/flows/${id}/history?minutes=${state.minutes}`),
      ]);
      renderStatus(status);
      renderPlots(hist);
      await loadSamples(id);
      loadError("");
    } catch (e) {
      loadError(e.status === 401
        ? "this control plane needs the token to show its flows (401): type it above"
        : `cannot read the control plane: ${e.message}`);
    }
  }

  async function loop() {
    await refresh();
    setTimeout(loop, REFRESH_MS);
  }

  function showToken() {
    let text = "no token: read only";
    if (state.token) text = state.tokenChecked ? "token accepted for this tab" : "token not checked yet";
    $("token-state").textContent = text;
  }

  function keepToken(token) {
    state.token = token;
    state.tokenChecked = Boolean(token);
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    else sessionStorage.removeItem(TOKEN_KEY);
    showToken();
  }

  // A token is kept only once the control plane accepted it (GET /v1/token: 200, else 401).
  async function checkToken(token, stored) {
    try {
      await api("/v1/token", { token });
      keepToken(token);
      if (!stored) say("token accepted by the control plane", "ok");
    } catch (e) {
      if (stored) keepToken("");
      else showToken();
      const what = stored ? "the token kept in this tab" : "wrong token";
      say(e.status === 401
        ? `${what}: refused by the control plane (401: ${e.detail}); not kept`
        : `cannot check the token: ${e.message}; not kept`, "error");
    }
  }

  $("token-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const typed = $("token").value.trim();
    $("token").value = "";
    if (!typed) keepToken("");
    else await checkToken(typed, false);
    refresh();
  });
  $("forget-token").addEventListener("click", () => {
    keepToken("");
    say("token forgotten", "ok");
  });
  $("minutes").addEventListener("change", (ev) => {
    state.minutes = Number(ev.target.value);
    refresh();
  });
  $("state-form").addEventListener("submit", readState);
  $("pause-flow").addEventListener("click", () => change(null, "paused"));
  $("resume-flow").addEventListener("click", () => change(null, "running"));
  showToken();
  if (STATIC) {
    document.body.classList.add("report");
    const runs = STATIC.summary.runs || 1;
    $("report-note").textContent = `A report of the checkpoint's recorded epochs: ${runs} ${plural(runs, "run")}, ` +
      "one sample per epoch; every count covers every run; read only.";
    $("report-note").hidden = false;
    document.title = `Wire report: ${STATIC.summary.id}`;
    refresh();
  } else {
    if (state.token) checkToken(state.token, true); // kept from earlier, or from the URL: check it
    loop();
  }
})();
