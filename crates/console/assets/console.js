// The ShopEasy console page: one ES module, no build step, no library.
// It listens to /events (server-sent snapshots, about twice a second) and
// draws each one; its buttons call /api/* with the admin token the person
// typed (kept in sessionStorage for this tab only).

const TOKEN_KEY = "shopeasy-console-token";
const SVG = "http://www.w3.org/2000/svg";
// The breaker charts span what the console has seen, 20 s to 2 min.
const MIN_WINDOW_MS = 20_000;
const MAX_WINDOW_MS = 120_000;
const POSITIONS = {
  gateway: [90, 120],
  product: [380, 40],
  order: [380, 195],
  inventory: [640, 195],
};
const DEFAULT_ATTRIBUTES = {
  latency: { latency: 1000, jitter: 0 },
  timeout: { timeout: 0 },
  reset_peer: { timeout: 0 },
  bandwidth: { rate: 10 },
  slow_close: { delay: 1000 },
  slicer: { average_size: 64, size_variation: 32, delay: 10 },
  limit_data: { bytes: 1024 },
};

const $ = (id) => document.getElementById(id);
let latest = null;
let selectedEdge = null;
let edgeToxicsKey = "";
let graphKey = "";

// ---- talking to the console ------------------------------------------------

function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

function say(text, ok) {
  const s = $("status");
  s.textContent = text;
  s.className = ok ? "ok" : "error";
}

/** Calls the console; shows the outcome (a refusal's `detail`) in #status. */
async function api(method, path, body, done) {
  const headers = {};
  if (token()) headers.authorization = `Bearer ${token()}`;
  if (body !== undefined) headers["content-type"] = "application/json";
  let res;
  try {
    res = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (e) {
    say(`The console did not answer: ${e}`, false);
    return null;
  }
  let answer = null;
  const text = await res.text();
  try {
    answer = text ? JSON.parse(text) : null;
  } catch {
    answer = null;
  }
  if (!res.ok) {
    const detail = (answer && (answer.detail || answer.error)) || res.statusText;
    const why = res.status === 401 ? " — enter the admin token above" : "";
    say(`Refused (${res.status}): ${detail}${why}`, false);
    return null;
  }
  say(done(answer), true);
  return answer ?? {};
}

// ---- topology ----------------------------------------------------------------

function el(name, attrs = {}, parent = null) {
  const node = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (parent) parent.appendChild(node);
  return node;
}

function colour(successRate) {
  if (successRate === null || successRate === undefined) return "#8c959f";
  return `hsl(${Math.round(successRate * 120)}, 70%, 38%)`;
}

function width(rate) {
  return 2 + Math.min(14, Math.log2(1 + rate) * 2);
}

function buildGraph(snap) {
  const svg = $("graph");
  svg.replaceChildren();
  for (const edge of snap.edges) {
    const [x1, y1] = POSITIONS[edge.from] || [0, 0];
    const [x2, y2] = POSITIONS[edge.to] || [0, 0];
    const g = el("g", {
      class: "edge",
      "data-edge": edge.name,
      tabindex: "0",
      role: "button",
      "aria-label": `edge ${edge.name}: open its fault controls`,
    }, svg);
    el("line", { x1, y1, x2, y2, class: "wire" }, g);
    el("line", { x1, y1, x2, y2, class: "hit" }, g);
    // A handle at the midpoint: where to click (and a box with a height
    // even for a horizontal edge).
    el("circle", { cx: (x1 + x2) / 2, cy: (y1 + y2) / 2, r: 8, class: "handle" }, g);
    g.addEventListener("click", () => openEdge(edge.name));
    g.addEventListener("keydown", (e) => {
      if (e.key === "Enter" || e.key === " ") {
        e.preventDefault();
        openEdge(edge.name);
      }
    });
  }
  for (const service of snap.services) {
    const [x, y] = POSITIONS[service.name] || [40, 20];
    const g = el("g", { class: "node", "data-service": service.name }, svg);
    el("rect", { x: x - 55, y: y - 18, width: 110, height: 36, rx: 6 }, g);
    el("text", { x, y: y + 5 }, g).textContent = service.name;
  }
  // Full mode: each service's stores in a row under it, on a thin line.
  for (const store of snap.stores || []) {
    const [sx, sy] = POSITIONS[store.service] || [40, 20];
    const [x, y] = storePosition(snap, store);
    const g = el("g", { class: "store", "data-store": `${store.service}/${store.store}` }, svg);
    el("line", { x1: sx, y1: sy + 18, x2: x, y2: y - 10, stroke: "#8c959f", "stroke-width": 1 }, g);
    el("rect", { x: x - 60, y: y - 10, width: 120, height: 20, rx: 4, "stroke-width": 1.5 }, g);
    const label = el("text", { x, y: y + 4 }, g);
    label.style.fontSize = "11px";
    label.textContent = `${store.service} · ${store.store}`;
    el("title", {}, g);
  }
  // Badges on top of everything, stacked beside each edge's midpoint.
  for (const edge of snap.edges) {
    const [x1, y1] = POSITIONS[edge.from] || [0, 0];
    const [x2, y2] = POSITIONS[edge.to] || [0, 0];
    const badges = el("g", { class: "badges", "data-badges": edge.name,
      transform: `translate(${(x1 + x2) / 2 + 6}, ${(y1 + y2) / 2 + 6})` }, svg);
    badges.addEventListener("click", () => openEdge(edge.name));
  }
}

/** Where `store` sits: in a row under its service, 130 px apart. */
function storePosition(snap, store) {
  const [x, y] = POSITIONS[store.service] || [40, 20];
  const row = (snap.stores || []).filter((s) => s.service === store.service);
  const i = row.findIndex((s) => s.store === store.store);
  return [x + (i - (row.length - 1) / 2) * 130, y + 58];
}

/** A store's fill and stroke: green up, red down, grey unknown. */
const STORE_COLOURS = {
  true: ["#dafbe1", "#1a7f37"],
  false: ["#ffebe9", "#cf222e"],
  null: ["#f6f8fa", "#8c959f"],
};

/** One badge on row `y` of an edge's stack; returns the next row. */
function badge(parent, y, text, kind, fill) {
  const g = el("g", { class: `badge ${kind}`, transform: `translate(0, ${y})` }, parent);
  const w = 8 + text.length * 6.5;
  const rect = el("rect", { width: w, height: 18 }, g);
  if (fill) rect.style.fill = fill;
  el("text", { x: w / 2, y: 13 }, g).textContent = text;
  return y + 21;
}

function drawGraph(snap) {
  const key = snap.edges.map((e) => e.name).join() + "|" + snap.services.map((s) => s.name).join() +
    "|" + (snap.stores || []).map((s) => `${s.service}/${s.store}`).join();
  if (key !== graphKey) {
    buildGraph(snap);
    graphKey = key;
  }
  for (const edge of snap.edges) {
    const g = document.querySelector(`[data-edge="${edge.name}"]`);
    if (!g) continue;
    const wire = g.querySelector("line.wire");
    wire.setAttribute("stroke", edge.enabled ? colour(edge.success_rate) : "#57606a");
    wire.setAttribute("stroke-width", width(edge.request_rate));
    wire.setAttribute("stroke-dasharray", edge.enabled ? "" : "6 4");
    g.dataset.toxics = edge.toxics.map((t) => t.name).join(",");
    g.dataset.breaker = edge.breaker || "";
    g.dataset.enabled = edge.enabled;
    const pct = edge.success_rate === null ? "idle" : `${Math.round(edge.success_rate * 100)} % ok`;
    g.setAttribute("aria-label", `edge ${edge.name}: ${fmt(edge.request_rate, 1)}/s, ${pct}, ` +
      `${edge.toxics.length} toxic(s), breaker ${edge.breaker || "none"}`);
    const badges = document.querySelector(`[data-badges="${edge.name}"]`);
    badges.replaceChildren();
    let y = 0;
    y = badge(badges, y, `${fmt(edge.request_rate, 0)}/s ${pct}`, "rate", colour(edge.success_rate));
    for (const t of edge.toxics) y = badge(badges, y, `☠ ${t.name}: ${t.type}`, "toxic");
    if (edge.breaker && edge.breaker !== "closed") {
      y = badge(badges, y, `breaker ${edge.breaker.replace("_", "-")}`, edge.breaker);
    }
    if (!edge.enabled) badge(badges, y, "disabled", "disabled");
  }
  for (const service of snap.services) {
    const g = document.querySelector(`[data-service="${service.name}"]`);
    if (g) g.classList.toggle("down", !service.up);
  }
  for (const store of snap.stores || []) {
    const g = document.querySelector(`[data-store="${store.service}/${store.store}"]`);
    if (!g) continue;
    const [fill, stroke] = STORE_COLOURS[store.up ?? null];
    const rect = g.querySelector("rect");
    rect.style.fill = fill;
    rect.style.stroke = stroke;
    g.dataset.up = String(store.up ?? "unknown");
    const state = store.up === null ? "unknown" : store.up ? "up" : "down";
    g.querySelector("title").textContent =
      `${store.service} · ${store.store}: ${state}${store.detail ? ` (${store.detail})` : ""}`;
  }
  if (selectedEdge) drawEdgeForm(snap);
}

// ---- the edge form -------------------------------------------------------------

function openEdge(name) {
  selectedEdge = name;
  edgeToxicsKey = "";
  $("edge-form").hidden = false;
  $("edge-name").textContent = name;
  if (latest) drawEdgeForm(latest);
  $("toxic-name").focus();
}

function currentEdge(snap) {
  return snap.edges.find((e) => e.name === selectedEdge);
}

function drawEdgeForm(snap) {
  const edge = currentEdge(snap);
  if (!edge) return;
  $("edge-toggle").textContent = edge.enabled ? "Disable edge" : "Enable edge";
  const key = JSON.stringify(edge.toxics);
  if (key === edgeToxicsKey) return;
  edgeToxicsKey = key;
  const box = $("edge-toxics");
  box.replaceChildren();
  if (edge.toxics.length === 0) {
    box.textContent = "No toxic on this edge.";
    return;
  }
  const list = document.createElement("ul");
  for (const t of edge.toxics) {
    const li = document.createElement("li");
    li.dataset.toxic = t.name;
    li.textContent = `${t.name}: ${t.type} (${t.stream}, toxicity ${t.toxicity}) ${JSON.stringify(t.attributes)} `;
    const remove = document.createElement("button");
    remove.type = "button";
    remove.textContent = `Remove ${t.name}`;
    remove.addEventListener("click", () =>
      api("DELETE", `/api/faults/proxies/${edge.name}/toxics/${encodeURIComponent(t.name)}`, undefined,
        () => `Removed ${t.name} from ${edge.name}`));
    li.appendChild(remove);
    list.appendChild(li);
  }
  box.appendChild(list);
}

function wireEdgeForm() {
  $("toxic-type").addEventListener("change", () => {
    $("toxic-attributes").value = JSON.stringify(DEFAULT_ATTRIBUTES[$("toxic-type").value] || {});
  });
  $("edge-form").addEventListener("submit", (e) => {
    e.preventDefault();
    let attributes;
    try {
      attributes = JSON.parse($("toxic-attributes").value || "{}");
    } catch (err) {
      say(`The attributes are not JSON: ${err.message}`, false);
      return;
    }
    const toxic = {
      name: $("toxic-name").value,
      type: $("toxic-type").value,
      stream: $("toxic-stream").value,
      toxicity: Number($("toxic-toxicity").value),
      attributes,
    };
    api("POST", `/api/faults/proxies/${selectedEdge}/toxics`, toxic,
      () => `Added ${toxic.type} toxic “${toxic.name}” on ${selectedEdge}`);
  });
  $("edge-toggle").addEventListener("click", () => {
    const edge = latest && currentEdge(latest);
    if (!edge) return;
    api("POST", `/api/faults/proxies/${edge.name}`, { enabled: !edge.enabled },
      () => `${edge.name} ${edge.enabled ? "disabled" : "enabled"}`);
  });
  $("edge-close").addEventListener("click", () => {
    selectedEdge = null;
    $("edge-form").hidden = true;
  });
}

// ---- breakers --------------------------------------------------------------------

const LEVEL = { open: 12, half_open: 35, closed: 58 };

function stepChart(b, now) {
  const first = b.history.length ? b.history[0].at_unix_ms : now;
  const span = Math.min(MAX_WINDOW_MS, Math.max(MIN_WINDOW_MS, now - first));
  const svg = el("svg", { viewBox: "0 0 600 70", preserveAspectRatio: "none", role: "img",
    "aria-label": `state of ${b.name} over the last ${Math.round(span / 1000)} s` });
  for (const [state, y] of Object.entries(LEVEL)) {
    el("line", { x1: 0, x2: 600, y1: y, y2: y, stroke: "#eaeef2" }, svg);
    el("text", { x: 4, y: y - 2, "font-size": 9, fill: "#57606a" }, svg).textContent = state;
  }
  const x = (t) => Math.max(0, Math.min(600, ((t - (now - span)) / span) * 600));
  let d = "";
  let lastY = null;
  for (const p of b.history) {
    const y = LEVEL[p.state] ?? LEVEL.closed;
    const px = x(p.at_unix_ms);
    d += lastY === null ? `M${px},${y}` : `L${px},${lastY}L${px},${y}`;
    lastY = y;
  }
  if (lastY !== null) d += `L600,${lastY}`;
  el("path", { d, fill: "none", stroke: "#0969da", "stroke-width": 2 }, svg);
  for (const t of b.trials) {
    el("text", { x: x(t.at_unix_ms), y: 68, "font-size": 12, fill: t.ok ? "#1a7f37" : "#cf222e",
      "text-anchor": "middle" }, svg).textContent = t.ok ? "✓" : "✗";
  }
  return svg;
}

// The snapshot's numbers go through this: a value JSON cannot
// hold (an infinite rate) arrives as null, and `null.toFixed` would throw
// in the middle of drawing and blank the page.
function fmt(v, digits = 2) {
  return v === null || v === undefined ? "—" : Number(v).toFixed(digits);
}

function drawBreakers(snap) {
  const list = $("breaker-list");
  list.replaceChildren();
  for (const b of snap.breakers) {
    const div = document.createElement("div");
    div.className = "breaker";
    div.dataset.breaker = b.name;
    div.dataset.state = b.state;
    const title = document.createElement("h3");
    title.append(`${b.name} `);
    const state = document.createElement("span");
    state.className = "state";
    state.textContent = b.state.replace("_", "-");
    title.appendChild(state);
    div.appendChild(title);
    div.appendChild(stepChart(b, snap.at_unix_ms));
    const stats = document.createElement("p");
    stats.className = "stats";
    const ratio = b.failure_ratio === null ? "no calls in window" : `${Math.round(b.failure_ratio * 100)} %`;
    const next = b.next_trial_seconds === null ? "" : ` · next trial in ${fmt(b.next_trial_seconds, 1)} s`;
    const ok = b.trials.filter((t) => t.ok).length;
    stats.textContent = `failure ratio ${ratio} (opens at ${b.threshold === null ? "—" : Math.round(b.threshold * 100) + " %"}, ` +
      `min ${fmt(b.minimum_throughput, 0)} calls) · ${fmt(b.failures, 0)} failed / ${fmt(b.successes, 0)} ok in window · ` +
      `refused fast ${fmt(b.refused_fast, 0)} · trials ${ok} ✓ ${b.trials.length - ok} ✗${next}`;
    div.appendChild(stats);
    list.appendChild(div);
  }
}

// ---- tables ----------------------------------------------------------------------

function row(cells, attrs = {}) {
  const tr = document.createElement("tr");
  for (const [k, v] of Object.entries(attrs)) tr.dataset[k] = v;
  for (const c of cells) {
    const td = document.createElement("td");
    td.textContent = c;
    tr.appendChild(td);
  }
  return tr;
}

function drawTables(snap) {
  $("budget-rows").replaceChildren(...snap.budgets.map((b) =>
    row([b.name, fmt(b.balance, 1), fmt(b.retried, 0), fmt(b.denied, 0), fmt(b.attempts_per_call)], { budget: b.name })));
  const caches = [...snap.caches].sort((a, b) => (b.name.includes("stock") ? 1 : 0) - (a.name.includes("stock") ? 1 : 0));
  $("cache-rows").replaceChildren(...caches.map((c) =>
    row([c.name, fmt(c.entries, 0), ...["hit", "stale", "coalesced", "miss", "rejected"].map((k) => fmt(c.rates[k], 1)),
      c.oldest_stale_served_seconds === null ? "none yet"
        : `${fmt(c.oldest_stale_served_seconds, 1)} s / ${fmt(c.last_stale_served_seconds, 1)} s`,
      c.max_staleness_seconds === null ? "—" : `${c.max_staleness_seconds} s`], { cache: c.name })));
  $("admission-rows").replaceChildren(...snap.admission.map((a) => {
    const v = a.value || {};
    const counts = v.requests && typeof v.requests === "object"
      ? Object.entries(v.requests).filter(([k]) => k !== "admitted").map(([k, n]) => `${k} ${n}`).join(", ")
      : "—";
    return row([a.name, fmt(v.limit, 0), fmt(v.in_flight, 0), `${fmt(v.queued, 0)} / ${fmt(v.queue_size, 0)}`, counts],
      { admission: a.name });
  }));
  const limits = $("limit-list");
  limits.replaceChildren(...snap.limits.map((l) => {
    const p = document.createElement("p");
    p.className = "hint";
    p.textContent = `${l.name}: ${JSON.stringify(l.value)}`;
    return p;
  }));
  const o = snap.outbox;
  $("outbox-body").textContent = !o ? "not reported"
    : o.pending === 0 ? "no order waiting"
      : o.oldest_pending_age_seconds !== null
        ? `${o.pending} order(s) waiting; the oldest for ${fmt(o.oldest_pending_age_seconds, 1)} s`
        : `${o.pending} order(s) waiting, for at least ${((snap.at_unix_ms - o.pending_since_unix_ms) / 1000).toFixed(1)} s`;
  const l = snap.load;
  if (!l) {
    $("load-body").textContent = "Not available here: this console has no load generator (run `shopeasy load`).";
  } else {
    const statuses = Object.entries(l.statuses).map(([s, n]) => `${s === "0" ? "no answer" : s}: ${n}`).join(", ") || "—";
    $("load-body").textContent = `${l.running ? "running" : "stopped"} · ${fmt(l.live_rate, 0)}/s live · sent ${l.sent} · ` +
      `p50 ${fmt(l.p50_ms, 1)} ms · p99 ${fmt(l.p99_ms, 1)} ms · ${statuses}${l.error ? " · " + l.error : ""}`;
  }
  const orders = $("order-list");
  if (snap.orders.length) {
    orders.replaceChildren(...snap.orders.map((o) => {
      const li = document.createElement("li");
      li.dataset.order = o.id;
      li.dataset.status = o.status;
      li.append(`${o.id.slice(0, 8)}… `);
      const s = document.createElement("span");
      s.className = "status";
      s.textContent = o.status;
      li.appendChild(s);
      li.append(` (answered ${o.http_status})`);
      return li;
    }));
  }
  $("error-list").replaceChildren(...snap.errors.map((e) => {
    const li = document.createElement("li");
    li.textContent = e;
    return li;
  }));
}

// ---- a recent order's path ---------------------------------------------------------

const ATTEMPT_MARK = { ok: "✓", retryable: "↻", failed: "✗" };

/** One row per hop on one time axis: the hop's span, its attempts, and the
 *  deadline it had left when it started. */
function drawPath(snap) {
  const panel = snap.order_path || { path: null, note: "not reported" };
  const svg = $("path-chart");
  svg.replaceChildren();
  const p = panel.path;
  if (!p) {
    $("path-note").textContent = panel.note || "—";
    svg.setAttribute("viewBox", "0 0 600 0");
    return;
  }
  const age = ((snap.at_unix_ms - p.started_unix_ms) / 1000).toFixed(0);
  $("path-note").textContent = `trace ${p.trace_id} · ${p.duration_ms.toFixed(1)} ms · ${age} s ago · ${p.hops.length} hops`;
  const left = 250, right = 590, rowH = 26, width = right - left;
  const total = Math.max(p.duration_ms, 0.001);
  const x = (ms) => left + (ms / total) * width;
  svg.setAttribute("viewBox", `0 0 600 ${p.hops.length * rowH + 16}`);
  p.hops.forEach((h, i) => {
    const y = i * rowH + 4;
    const kind = h.operation === "not reached" ? "unreached" : h.shared ? "shared" : "reached";
    const g = el("g", { class: `hop ${kind}`, "data-service": h.service }, svg);
    el("text", { x: 2, y: y + 11 }, g).textContent = `${h.service} · ${h.operation}`.slice(0, 44);
    el("text", { x: 2, y: y + 22, class: "deadline" }, g).textContent =
      h.deadline_left_ms === null ? "deadline left: none sent" : `deadline left: ${h.deadline_left_ms} ms`
        + (h.shared ? " (own)" : "") + (h.status === null ? "" : ` · ${h.status}`);
    el("rect", { class: "span", x: x(h.start_ms), y: y + 2, height: 12,
      width: Math.max(1, (h.duration_ms / total) * width) }, g);
    h.attempts.forEach((a) => {
      el("rect", { class: `attempt ${a.outcome}`, x: x(a.start_ms), y: y + 16, height: 4,
        width: Math.max(2, (a.duration_ms / total) * width) }, g);
      el("text", { x: x(a.start_ms), y: y + 25 }, g).textContent = `#${a.number}${ATTEMPT_MARK[a.outcome] || ""}`;
    });
  });
  const axis = p.hops.length * rowH + 12;
  el("line", { x1: left, x2: right, y1: axis - 8, y2: axis - 8, stroke: "#8c959f" }, svg);
  el("text", { x: left, y: axis + 2 }, svg).textContent = "0";
  el("text", { x: right - 40, y: axis + 2 }, svg).textContent = `${p.duration_ms.toFixed(0)} ms`;
}

// ---- wiring ------------------------------------------------------------------------

function render(snap) {
  latest = snap;
  document.body.dataset.seq = snap.seq;
  drawGraph(snap);
  drawBreakers(snap);
  drawTables(snap);
  drawPath(snap);
}

function freshness() {
  const f = $("freshness");
  if (!latest) return;
  const age = (Date.now() - latest.at_unix_ms) / 1000;
  f.textContent = `snapshot ${latest.seq}, ${age.toFixed(1)} s old`;
  f.classList.toggle("stale", age > 2);
}

function showToken() {
  $("token-state").textContent = token() ? "token set for this tab" : "no token: changes will be refused";
}

function wire() {
  $("token-form").addEventListener("submit", (e) => {
    e.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $("token").value.trim());
    $("token").value = "";
    showToken();
    say("Token kept for this tab.", true);
  });
  $("heal").addEventListener("click", () =>
    api("POST", "/api/faults/reset", undefined, () => "Healed: every toxic removed, every edge enabled"));
  $("buy").addEventListener("click", () =>
    api("POST", "/api/orders/buy", undefined, (o) => `Order ${o.id.slice(0, 8)}…: ${o.status} (answered ${o.http_status})`));
  $("load-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const request = {
      rate: Number($("load-rate").value),
      read_share: Number($("load-read").value),
      duration_seconds: Number($("load-duration").value),
    };
    api("POST", "/api/load/start", request, () => `Load started at ${request.rate}/s`);
  });
  $("load-stop").addEventListener("click", () => api("POST", "/api/load/stop", undefined, () => "Load stopped"));
  wireEdgeForm();
  showToken();
  const events = new EventSource("/events");
  events.addEventListener("snapshot", (e) => render(JSON.parse(e.data)));
  events.addEventListener("error", () => {
    $("freshness").textContent = "event stream lost; reconnecting…";
    $("freshness").classList.add("stale");
  });
  setInterval(freshness, 250);
}

wire();
