// The Scenarios and Presentation panels (issue 17 pt 4). A module of its
// own: it polls /api/scenes/current and /api/presentation once a second and
// uses the admin token console.js keeps for this tab. While a scene or a
// schedule runs, its faults show on the topology and breaker panels above.

const TOKEN_KEY = "shopeasy-console-token";
const $ = (id) => document.getElementById(id);

function headers() {
  const h = { "content-type": "application/json" };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) h.authorization = `Bearer ${token}`;
  return h;
}

function say(id, text, ok) {
  const node = $(id);
  node.textContent = text;
  node.className = ok ? "ok" : "error";
}

// A change; the problem's `detail` on failure.
async function call(method, path, body, statusId, okText) {
  let res;
  try {
    res = await fetch(path, { method, headers: headers(), body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (e) {
    say(statusId, `the console did not answer: ${e}`, false);
    return;
  }
  if (res.ok) {
    say(statusId, okText, true);
  } else {
    let detail = res.statusText;
    try { detail = (await res.json()).detail || detail; } catch (_) { /* not JSON */ }
    const why = res.status === 401 ? " — enter the admin token above" : "";
    say(statusId, `${res.status}: ${detail}${why}`, false);
  }
  refresh();
}

async function read(path) {
  try {
    const res = await fetch(path);
    return { status: res.status, body: res.ok ? await res.json() : null };
  } catch (_) {
    return { status: 0, body: null };
  }
}

let scenes = [];

function showScene() {
  const scene = scenes.find((s) => s.name === $("scene-select").value);
  $("scene-expected").textContent = scene ? `Expected: ${scene.expected}` : "";
  $("scene-summary").textContent = scene ? scene.summary : "";
}

async function loadScenes() {
  const { status, body } = await read("/api/scenes");
  if (status === 501) {
    $("scene-expected").textContent = "Not available here: this console cannot run scenes (use `shopeasy demo <scene> --target …`).";
    $("scene-form").hidden = true;
    return false;
  }
  if (!body) return true;
  scenes = body;
  const select = $("scene-select");
  select.replaceChildren(...scenes.map((s) => new Option(s.name, s.name)));
  showScene();
  return true;
}

function time(ms) {
  return ms ? new Date(ms).toLocaleTimeString() : "—";
}

async function refresh() {
  const scene = await read("/api/scenes/current");
  if (scene.body) {
    const s = scene.body;
    const took = s.ended_unix_ms ? ` in ${((s.ended_unix_ms - s.started_unix_ms) / 1000).toFixed(1)} s` : "";
    $("scene-state").textContent = `${s.name}: ${s.state}${took}${s.error ? ` — ${s.error}` : ""}`;
    $("scene-state").dataset.state = s.state;
    $("scene-table").textContent = s.table || (s.state === "running" ? "running… watch the topology and the breakers" : "");
  }
  const pres = await read("/api/presentation");
  if (pres.body) {
    const p = pres.body;
    const current = p.current ? `${p.current.toxic} on ${p.current.edge} until ${time(p.current.until_unix_ms)}` : "none";
    $("presentation-body").textContent = p.running
      ? `running: ${p.changes} fault${p.changes === 1 ? "" : "s"} so far; now ${current}; next at ${time(p.next_change_unix_ms)}${p.error ? `; last error: ${p.error}` : ""}`
      : `stopped${p.changes ? ` after ${p.changes} fault${p.changes === 1 ? "" : "s"}` : ""}${p.error ? `; last error: ${p.error}` : ""}`;
  }
}

function list(value) {
  return value.split(",").map((s) => s.trim()).filter((s) => s);
}

function wire() {
  $("scene-select").addEventListener("change", showScene);
  $("scene-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const name = $("scene-select").value;
    call("POST", `/api/scenes/${encodeURIComponent(name)}`, undefined, "scene-status", `scene ${name} started`);
  });
  $("presentation-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const body = {
      interval_s: Number($("presentation-interval").value),
      hold_s: Number($("presentation-hold").value),
      seed: Number($("presentation-seed").value),
      edges: list($("presentation-edges").value),
      toxics: list($("presentation-toxics").value),
    };
    call("POST", "/api/presentation", body, "presentation-status", "presentation started");
  });
  $("presentation-stop").addEventListener("click", () =>
    call("DELETE", "/api/presentation", undefined, "presentation-status", "presentation stopped; its faults are removed"));
}

async function main() {
  wire();
  await loadScenes();
  refresh();
  setInterval(refresh, 1000);
}

main();
