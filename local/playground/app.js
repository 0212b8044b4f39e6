// The playground: adapters from the catalog, requests through the local router, the base model
// beside them, and the runtime's live trace. Plain DOM code; the page has no build step.
"use strict";

const state = { catalog: null, selected: null, since: { runtime: 0, router: 0 }, events: [], canaries: {} };
const $ = (id) => document.getElementById(id);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k === "onclick") node.addEventListener("click", v);
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

const mb = (b) => (b == null ? "?" : b >= 1 << 30 ? (b / (1 << 30)).toFixed(1) + " GiB" : (b / (1 << 20)).toFixed(1) + " MiB");
const lora = (a) => `r=${a.rank} α=${a.alpha} ${a.targets}`;

async function getJSON(url, options) {
  const resp = await fetch(url, options);
  let body = {};
  try { body = await resp.json(); } catch (_) { /* empty or not JSON */ }
  return { status: resp.status, body };
}

async function loadCatalog() {
  const { body } = await getJSON("/local/catalog");
  state.catalog = body;
  const list = $("adapter-list");
  list.replaceChildren();
  const byTask = {};
  for (const a of body.adapters) (byTask[a.task] ||= []).push(a);
  for (const [task, adapters] of Object.entries(byTask)) {
    list.append(el("div", { class: "task-group" }, task.replaceAll("_", " ")));
    for (const a of adapters) {
      list.append(el("button", { class: "adapter-card", "data-name": a.name, role: "option", onclick: () => select(a.name) },
        el("div", { class: "name" }, a.name, el("span", { class: "avail", "data-avail": a.name }, "")),
        el("div", { class: "meta" }, `${lora(a)} · v${a.version}` +
          (a.canary ? ` · canary v${a.canary.version}${a.canary.mode === "shadow" ? " (shadow)" : ""}` : "")),
        el("div", { class: "desc" }, a.description || "")));
    }
  }
  const wanted = new URLSearchParams(location.search).get("adapter");
  const first = body.adapters.find((a) => a.name === wanted) || body.adapters[0];
  if (first) select(first.name);
}

function adapter(name) { return state.catalog.adapters.find((a) => a.name === name); }
function variants(a) { return state.catalog.adapters.filter((x) => x.task === a.task); }

function select(name) {
  const a = adapter(name);
  state.selected = a;
  for (const card of document.querySelectorAll(".adapter-card")) card.classList.toggle("selected", card.dataset.name === name);
  const task = state.catalog.tasks[a.task] || { instruction: "", samples: [] };
  $("task-title").textContent = a.name;
  $("task-instruction").textContent = task.instruction;
  $("lora-chips").replaceChildren(
    el("span", { class: "chip" }, `rank ${a.rank}`), el("span", { class: "chip" }, `alpha ${a.alpha}`),
    el("span", { class: "chip" }, a.targets), el("span", { class: "chip" }, `dropout ${a.dropout}`));
  $("samples").replaceChildren(...task.samples.map((s) =>
    el("button", { class: "sample", title: s, onclick: () => { $("query").value = s; updateButtons(); } }, s)));
  if (!$("query").value && task.samples.length) $("query").value = task.samples[0];
  updateButtons();
  showCanary();
}

const fmt = (v) => (v == null ? "–" : v.toFixed(3));

function showCanary() {
  // The selected adapter's canary: where it is, and each quality signal's mean over the
  // mirrored pairs, stable's beside the canary's (lambda_proxy/shadow.py state()).
  const box = $("canary");
  const c = state.selected && state.canaries[state.selected.name];
  box.hidden = !c;
  if (!c) return;
  const worse = new Set(Object.entries((c.decision && c.decision.signals) || {})
    .filter(([, b]) => b.upper < -b.margin).map(([s]) => s));
  const rows = c.signals.map((s) => el("tr", { class: worse.has(s.signal) ? "worse" : "" },
    el("td", {}, s.signal), el("td", {}, s.better), el("td", {}, s.pairs), el("td", {}, fmt(s.stable)),
    el("td", {}, fmt(s.canary)), el("td", {}, s.margin)));
  const mode = c.mode === "shadow"
    ? `shadow: ${Math.round(100 * c.shadow)}% of stable's requests mirrored`
    : `split: ${c.weight}% of session keys`;
  const progress = c.mode === "shadow" && c.state === "judging"
    ? ` · next look at ${c.next_look} pairs, promotion from ${c.promote_after}` : "";
  box.replaceChildren(
    el("h2", {}, "Canary"),
    el("div", { class: "canary-head" },
      el("span", { class: `canary-state ${c.state.replaceAll(" ", "-")}` }, c.state),
      el("span", {}, `v${c.version} beside stable v${c.stable_version} · ${mode}`),
      el("span", { class: "dim" }, `${c.pairs} pairs from ${c.callers} caller${c.callers === 1 ? "" : "s"}${progress}`)),
    el("table", { class: "signals" },
      el("thead", {}, el("tr", {}, ...["signal", "better", "pairs", "stable", "canary", "margin"].map((h) => el("th", {}, h)))),
      el("tbody", {}, ...rows)),
    c.decision && c.decision.reason ? el("p", { class: "decision" }, c.decision.reason) : "");
}

async function refreshCanaries() {
  const { status, body } = await getJSON("/local/canaries");
  if (status !== 200) return;
  state.canaries = body.adapters || {};
  showCanary();
}

function updateButtons() {
  const ready = state.selected && $("query").value.trim().length > 0;
  $("run").disabled = !ready;
  $("compare").disabled = !ready || variants(state.selected).length < 2;
}

function body() {
  const task = state.catalog.tasks[state.selected.task];
  const temperature = Number($("temperature").value) || 0;
  return {
    messages: [{ role: "system", content: task.instruction }, { role: "user", content: $("query").value }],
    parameters: { max_new_tokens: Number($("max-tokens").value) || 48, temperature, do_sample: temperature > 0 },
  };
}

function card(id, title, sub, isBase) {
  const node = el("div", { class: "result" + (isBase ? " base" : ""), id },
    el("h3", {}, el("span", {}, title), el("span", { class: "sub" }, sub)),
    el("div", { class: "badges" }), el("pre", { class: "output pending" }, "running…"));
  $("results").append(node);
  return node;
}

function fill(node, status, answer) {
  const badges = node.querySelector(".badges");
  const out = node.querySelector(".output");
  out.classList.remove("pending");
  if (status !== 200) {
    badges.replaceChildren(el("span", { class: "badge err" }, `HTTP ${status}`));
    out.textContent = answer.error || answer.message || JSON.stringify(answer);
    return;
  }
  const t = answer.timings_ms || {};
  const items = [];
  if (answer.cache) items.push(el("span", { class: "badge " + (answer.cache === "hit" ? "hit" : answer.cache === "miss" ? "miss" : "") }, `cache ${answer.cache}`));
  items.push(el("span", { class: "badge" }, `${Math.round(t.total ?? 0)} ms`));
  if (answer.usage) items.push(el("span", { class: "badge" }, `${answer.usage.output_tokens} tokens`));
  if (t.engine && t.engine.adapter_load > 0.05) items.push(el("span", { class: "badge" }, `adapter load ${t.engine.adapter_load.toFixed(1)} ms`));
  badges.replaceChildren(...items);
  const text = answer.output ?? "";
  out.textContent = text.trim() ? text : "(no visible text: the tokens decoded to whitespace or special tokens)";
  out.classList.toggle("empty", !text.trim());
}

async function run(names) {
  $("results").replaceChildren();
  const payload = body();
  const jobs = names.map(async (name, i) => {
    const a = adapter(name);
    const node = card(i === 0 ? "result-adapter" : `result-${name}`, name, lora(a), false);
    node.dataset.adapter = name;
    const { status, body: answer } = await getJSON(`/v1/adapters/${encodeURIComponent(name)}/generate`,
      { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(payload) });
    fill(node, status, answer);
  });
  if ($("with-base").checked) {
    const node = card("result-base", "base model", "no adapter", true);
    jobs.push(getJSON("/local/base/generate", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(payload) })
      .then(({ status, body: answer }) => fill(node, status, answer)));
  }
  await Promise.all(jobs);
  refreshStatus();
}

async function refreshStatus() {
  const { status, body: s } = await getJSON("/local/status");
  if (status !== 200) { $("st-base").innerHTML = "<b>runtime unreachable</b>"; return; }
  const base = s.base || {};
  const tiers = s.tiers || {};
  const mem = s.memory || {};
  $("st-base").innerHTML = `base <b>${base.model_id}</b>@${String(base.revision).slice(0, 12)} · ${base.dtype}`;
  $("st-device").innerHTML = `device <b>${base.device}</b>`;
  $("st-tiers").innerHTML = `adapters device <b>${tiers.device ?? 0}/${s.max_loras}</b> · host <b>${tiers.host ?? 0}</b> · disk <b>${tiers.disk ?? 0}</b>`;
  $("st-mem").innerHTML = `device mem <b>${mb(mem.device_used_bytes)}</b> · host rss <b>${mb(mem.host_rss_bytes)}</b>`;
  $("st-cache").innerHTML = `cache <b>${s.cache}</b>`;
  showAvailability(s.availability || {});
}

// Each adapter's state: online, or what the background trainer says (queued, training with its
// step, evaluating, not publishable, failed).
function showAvailability(availability) {
  for (const node of document.querySelectorAll("[data-avail]")) {
    const st = availability[node.dataset.avail] || { state: "offline" };
    let text = st.state;
    if (st.state === "training" && st.steps) text += ` ${st.step || 0}/${st.steps}`;
    if (st.state === "online" && st.publishable === false) text += " (not publishable)";
    node.textContent = text;
    node.className = "avail " + st.state.replaceAll(" ", "-");
    node.title = st.detail || "";
  }
}

function describe(e) {
  const parts = [];
  if (e.adapter) parts.push(e.adapter);
  if (e.source) parts.push(`${e.source} → ${e.target ?? ""}`);
  if (e.latency_ms != null) parts.push(`${Number(e.latency_ms).toFixed(1)} ms`);
  if (e.cache) parts.push(`cache ${e.cache}`);
  if (e.status != null && e.origin === "router") parts.push(`HTTP ${e.status}`);
  if (e.reason) parts.push(e.reason);
  if (e.bytes) parts.push(mb(e.bytes));
  return parts.join(" · ");
}

function kind(e) {
  if (e.origin === "router") return e.cache === "hit" ? "router hit" : "router";
  if (e.event.includes("promote")) return "promote";
  if (e.event.includes("evict")) return "evict";
  if (e.event.includes("reject")) return "reject";
  return "load";
}

async function refreshTrace() {
  const { status, body: t } = await getJSON(`/local/trace?since_runtime=${state.since.runtime}&since_router=${state.since.router}`);
  if (status !== 200) return;
  for (const e of t.runtime) state.since.runtime = Math.max(state.since.runtime, e.seq);
  for (const e of t.router) state.since.router = Math.max(state.since.router, e.seq);
  const fresh = [...t.runtime, ...t.router].sort((a, b) => a.ts - b.ts);
  if (!fresh.length) return;
  state.events.push(...fresh);
  state.events = state.events.slice(-300);
  const list = $("trace");
  for (const e of fresh) {
    const time = new Date(e.ts * 1000).toLocaleTimeString();
    list.prepend(el("li", { class: kind(e) },
      el("span", { class: "t" }, time), el("span", { class: "e" }, e.origin === "router" ? "router_request" : e.event),
      el("span", { class: "d" }, describe(e))));
  }
  while (list.children.length > 300) list.lastChild.remove();
  $("trace-count").textContent = `${state.events.length} events`;
}

async function refreshUsage() {
  // What `python -m local usage` prints: the router's usage records, per tenant and adapter.
  const { status, body: u } = await getJSON("/local/usage");
  if (status !== 200) return;
  const rows = u.rows.map((r) => el("tr", {},
    el("td", {}, r.tenant.split(":").pop()), el("td", {}, r.adapter), el("td", {}, r.requests),
    el("td", {}, r.tokens_in), el("td", {}, r.tokens_out),
    el("td", {}, `${Math.round(100 * r.cache_hit_share)}%`), el("td", {}, Math.round(r.p99_ms))));
  $("usage").tBodies[0].replaceChildren(...rows);
}

$("query").addEventListener("input", updateButtons);
$("run").addEventListener("click", () => run([state.selected.name]));
$("compare").addEventListener("click", () => run(variants(state.selected).map((a) => a.name)));

loadCatalog().then(refreshStatus);
refreshTrace();
setInterval(refreshStatus, 3000);
setInterval(refreshTrace, 1000);
refreshUsage();
setInterval(refreshUsage, 5000);
refreshCanaries();
setInterval(refreshCanaries, 3000);
