// swarmgate status page: polls the admin JSON endpoints and renders them.
// Everything from the server is set as text (never as HTML): refusal model
// names can come from clients.
"use strict";

const POLL_MS = 2000;

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("data-")) e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

// With admin.token set the JSON endpoints need a bearer token. It is asked
// for once and kept in sessionStorage (this tab only, gone when it closes).
const TOKEN_KEY = "swarmgate-admin-token";

function authHeaders() {
  const t = sessionStorage.getItem(TOKEN_KEY);
  return t ? { Authorization: "Bearer " + t } : {};
}

async function getJSON(path) {
  const resp = await fetch(path, { cache: "no-store", headers: authHeaders() });
  let body = null;
  try { body = await resp.json(); } catch (_) { /* not JSON */ }
  return { ok: resp.ok, status: resp.status, body };
}

function unavailable(container, r) {
  const msg = (r.body && r.body.error) || ("HTTP " + r.status);
  container.replaceChildren(el("div", { class: "empty" }, msg));
}

function ago(iso) {
  const t = Date.parse(iso);
  if (isNaN(t)) return "";
  const s = Math.round((Date.now() - t) / 1000);
  if (s < 60) return s + "s ago";
  if (s < 3600) return Math.floor(s / 60) + "m ago";
  return new Date(t).toISOString().replace("T", " ").slice(0, 19) + "Z";
}

function until(iso) {
  const t = Date.parse(iso);
  if (isNaN(t)) return "";
  const s = Math.round((t - Date.now()) / 1000);
  return s > 0 ? "· " + s + "s left" : "";
}

function renderReady(r) {
  const badge = document.getElementById("ready");
  const reasons = document.getElementById("reasons");
  const b = r.body || {};
  const status = b.status || "unknown";
  badge.dataset.status = status;
  badge.textContent = status;
  document.getElementById("version").textContent = b.version ? "version " + b.version : "";
  if (b.reasons && b.reasons.length) {
    reasons.textContent = b.reasons.join(" · ");
    reasons.hidden = false;
  } else {
    reasons.hidden = true;
  }
}

function renderPools(r) {
  const box = document.getElementById("pools");
  const summary = document.getElementById("pools-summary");
  if (!r.ok) { unavailable(box, r); summary.textContent = ""; return; }
  let total = 0, open = 0;
  const cards = r.body.pools.map((p) => {
    total += p.total; open += p.open;
    const rows = p.keys.map((k) => el("tr", { "data-key": p.backend + "/" + k.key_id },
      el("td", { class: "key" }, k.key_id),
      el("td", {}, el("span", { class: "state", "data-state": k.state }, k.state)),
      el("td", {}, k.weight),
      el("td", {}, k.in_flight),
      el("td", {}, k.picks),
      el("td", {}, k.consecutive_429 + " / " + k.consecutive_5xx),
      el("td", {}, k.trips),
      el("td", {}, k.last_status || ""),
      el("td", { class: "reason" }, [k.reason, k.open_until ? until(k.open_until) : ""].filter(Boolean).join(" "))));
    return el("div", { class: "pool", "data-backend": p.backend },
      el("h3", {}, p.backend, el("span", { class: "muted" }, p.open + " of " + p.total + " open")),
      p.keys.length
        ? el("table", {},
            el("thead", {}, el("tr", {}, ...["key", "breaker", "weight", "in flight", "picks", "429 / 5xx", "trips", "last", "why"].map((h) => el("th", {}, h)))),
            el("tbody", {}, ...rows))
        : el("div", { class: "empty" }, "no keys"));
  });
  box.replaceChildren(...(cards.length ? cards : [el("div", { class: "empty" }, "no backends")]));
  summary.textContent = open + " of " + total + " keys open";
}

// Sub-keys' budgets (stored with the key; period run, day or month) beside
// the key's spend from the ledger: /v1/keys needs the admin token, so they
// show only with one. Read every 30 s, not every poll: one /usage?key= per
// budgeted key, at most 50.
const KEY_BUDGETS_MS = 30000;
let keyBudgets = [];
let keyBudgetsAt = -Infinity;

function keySpend(k, u) {
  if (!u.ok || !u.body) return 0; // 404: the key has not spent yet
  if (k.budget.period === "run") return Number(u.body.all_time.cost);
  if (k.budget.period === "day") {
    const today = new Date().toISOString().slice(0, 10);
    const d = (u.body.days || []).find((d) => d.date === today);
    return d ? Number(d.cost) : 0;
  }
  return Number(u.body.total.cost);
}

async function pollKeyBudgets() {
  if (Date.now() - keyBudgetsAt < KEY_BUDGETS_MS) return;
  keyBudgetsAt = Date.now();
  const r = await getJSON("/v1/keys").catch(() => ({ ok: false }));
  if (!r.ok || !r.body || !r.body.keys) { keyBudgets = []; return; }
  const budgeted = r.body.keys.filter((k) => k.budget && k.budget.amount > 0 && !k.revoked && !k.expired).slice(0, 50);
  keyBudgets = await Promise.all(budgeted.map(async (k) => {
    const u = await getJSON("/usage?key=" + encodeURIComponent(k.id) + "&tenant=" + encodeURIComponent(k.tenant))
      .catch(() => ({ ok: false }));
    const spent = keySpend(k, u);
    return { tenant: k.tenant, key_id: k.id, period: k.budget.period, spent, limit: k.budget.amount,
      percent: spent / k.budget.amount * 100, currency: (u.body && u.body.currency) || "", hard_cap: !!k.budget.hard_cap };
  }));
}

// Budgets closest to their cap come first; at 75% a budget is "near cap".
// A sub-key's budget is shown under its tenant, with its period.
function renderBudgets(r) {
  const box = document.getElementById("budgets");
  if (!r.ok) { unavailable(box, r); return; }
  const reported = new Set(r.body.budgets.filter((b) => b.key_id).map((b) => b.key_id));
  const all = r.body.budgets.concat(keyBudgets.filter((b) => !reported.has(b.key_id)));
  const budgets = all.sort((a, b) => (b.limit > 0 ? b.percent : -1) - (a.limit > 0 ? a.percent : -1));
  const rows = budgets.map((b) => {
    const pct = b.limit > 0 ? b.percent : 0;
    const level = pct >= 90 ? "bad" : pct >= 75 ? "warn" : "ok";
    const money = (v) => v.toFixed(2);
    const label = b.limit > 0
      ? money(b.spent) + " / " + money(b.limit) + " " + (b.currency || "") + " (" + pct.toFixed(1) + "%)" + (b.hard_cap ? " hard cap" : "") + (pct >= 75 ? " · near cap" : "")
      : money(b.spent) + " " + (b.currency || "") + " (no budget)";
    const who = b.key_id ? b.tenant + " / " + b.key_id + (b.period ? " (" + b.period + ")" : "") : b.tenant;
    return el("div", { class: "budget", "data-tenant": b.tenant, "data-budget-key": b.key_id || "", "data-percent": pct.toFixed(1), "data-near": String(pct >= 75) },
      el("strong", {}, who),
      el("div", { class: "bar" }, el("div", { class: "fill", "data-level": level })),
      el("span", { class: "muted" }, label));
  });
  box.replaceChildren(...(rows.length ? rows : [el("div", { class: "empty" }, "no tenant has a budget")]));
  // Widths are set through CSSOM, which the page's CSP allows (inline style
  // attributes it does not).
  box.querySelectorAll(".budget").forEach((row) => {
    row.querySelector(".fill").style.width = Math.min(100, parseFloat(row.dataset.percent)) + "%";
  });
}

// The ledger's month rankings (/usage?top=...): the keys and the runs (the
// label "run") that spent most. Costs are exact decimal strings.
function renderTop(bodyId, r, name) {
  const body = document.getElementById(bodyId);
  const empty = (msg) => body.replaceChildren(el("tr", {}, el("td", { colSpan: 5, class: "empty" }, msg)));
  if (!r.ok) { empty((r.body && r.body.error && (r.body.error.message || r.body.error)) || "HTTP " + r.status); return; }
  const top = (r.body && r.body.top) || [];
  if (!top.length) { empty("no spend this month"); return; }
  const cur = r.body.currency || "";
  body.replaceChildren(...top.map((t) => el("tr", { "data-top": t.tenant + "/" + name(t) },
    el("td", { class: "key" }, name(t)),
    el("td", {}, t.tenant),
    el("td", {}, t.total.requests),
    el("td", {}, t.total.total_tokens || t.total.input_tokens + t.total.output_tokens),
    el("td", {}, Number(t.total.cost).toFixed(4) + " " + cur))));
  document.getElementById("spend-month").textContent = r.body.month || "";
}

function secs(v) {
  return v < 10 ? v.toFixed(2) + "s" : Math.round(v) + "s";
}

// The admission queue of this replica: its local waiters per scope (a set
// of backends, or a TPM window), and how waits ended since start.
function renderAdmission(r) {
  const box = document.getElementById("admission");
  const summary = document.getElementById("admission-summary");
  if (!r.ok) { unavailable(box, r); summary.textContent = ""; return; }
  const q = r.body;
  const cards = (q.scopes || []).map((s) => el("div", { class: "pool", "data-scope": s.scope },
    el("h3", {}, s.scope, el("span", { class: "muted" }, "depth " + s.depth + " · oldest " + secs(s.oldest_wait_seconds))),
    el("table", {},
      el("thead", {}, el("tr", {}, ...["tenant", "class", "waiting"].map((h) => el("th", {}, h)))),
      el("tbody", {}, ...s.waiters.map((w) => el("tr", { "data-waiters": s.scope + "/" + w.tenant + "/" + w.class },
        el("td", {}, w.tenant || "—"),
        el("td", {}, w.class_name || String(w.class)),
        el("td", {}, w.count)))))));
  const head = q.queueing
    ? (cards.length ? [] : [el("div", { class: "empty" }, "nobody waiting")])
    : [el("div", { class: "empty", "data-queueing": "off" }, "queueing off: " + q.reason)];
  box.replaceChildren(...head, ...cards);
  const c = q.counters; // absent when this process has no queue
  summary.textContent = c
    ? [q.waiting + " waiting of " + q.max_queue, c.admitted_after_wait + " admitted after a wait", c.timed_out + " timed out",
       c.cancelled + " cancelled", c.too_long + " too long", c.full + " full", c.order_down + " order down"].join(" · ")
    : "";
}

function renderRefusals(r) {
  const body = document.getElementById("refusals");
  const total = document.getElementById("refusals-total");
  if (!r.ok) {
    body.replaceChildren(el("tr", {}, el("td", { colSpan: 5, class: "empty" }, (r.body && r.body.error) || "HTTP " + r.status)));
    total.textContent = "";
    return;
  }
  const rows = r.body.refusals.map((f) => el("tr", {},
    el("td", { title: f.time }, ago(f.time)),
    el("td", {}, f.tenant || "—"),
    el("td", {}, f.model || "—"),
    el("td", {}, f.status),
    el("td", { class: "reason" }, f.reason)));
  body.replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", { colSpan: 5, class: "empty" }, "none"))]));
  total.textContent = r.body.total + " since start";
}

async function poll() {
  await pollKeyBudgets();
  const [ready, keys, budgets, admission, refusals, topKeys, topRuns] = await Promise.all(
    ["/readyz", "/keys", "/budgets", "/admission", "/refusals?limit=50", "/usage?top=keys&limit=10", "/usage?top=label:run&limit=10"].map((p) =>
      getJSON(p).catch((e) => ({ ok: false, status: 0, body: { error: String(e) } }))));
  renderReady(ready);
  renderPools(keys);
  renderBudgets(budgets);
  renderAdmission(admission);
  renderRefusals(refusals);
  renderTop("top-keys", topKeys, (t) => t.key);
  renderTop("top-runs", topRuns, (t) => t.label.value);
  document.getElementById("auth").hidden = ![keys, budgets, admission, refusals, topKeys].some((r) => r.status === 401);
  document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
  document.body.dataset.loaded = "true";
}

document.getElementById("auth").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const input = document.getElementById("token");
  sessionStorage.setItem(TOKEN_KEY, input.value.trim());
  input.value = "";
  poll();
});

poll();
setInterval(poll, POLL_MS);
