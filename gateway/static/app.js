// turnstream playground: runs a session and renders its live event stream. No build step.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { sid: null, lastId: "0-0", ws: null, ended: true, turns: new Map(), sentAt: 0, retries: 0 };

// ------------------------------------------------------------------ HTTP
function apiKey() { return $("key").value.trim(); }

async function api(path, body) {
  const headers = { "Content-Type": "application/json" };
  if (apiKey()) headers.Authorization = "Bearer " + apiKey();
  const resp = await fetch(path, body === undefined ? { headers } : { method: "POST", headers, body: JSON.stringify(body) });
  const data = await resp.json().catch(() => ({}));
  if (!resp.ok) throw new Error((data.error && data.error.message) || resp.statusText);
  return data;
}

async function loadTools() {
  try {
    const tools = (await api("/v1/tools")).data;
    $("tools").replaceChildren(...tools.map((t) => {
      const label = el("label");
      const box = el("input");
      box.type = "checkbox"; box.checked = true; box.value = t.function.name;
      label.append(box, t.function.name);
      label.title = t.function.description || "";
      return label;
    }));
  } catch (e) { $("tools").textContent = "could not load tools: " + e.message; }
}

// ------------------------------------------------------------------ DOM helpers
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}
function log(node) { $("log").append(node); $("log").scrollTop = $("log").scrollHeight; return node; }
function note(text, cls) { log(el("div", "note" + (cls ? " " + cls : ""), text)); }
function setState(s, label) {
  document.body.dataset.state = s;
  $("status").textContent = label || s;
  $("cancel").disabled = s !== "running";
}
const ms = (seconds) => Math.round(seconds * 1000) + " ms";

// ------------------------------------------------------------------ session control
async function send(ev) {
  ev.preventDefault();
  const text = $("message").value.trim();
  if (!text || document.body.dataset.state === "running") return;
  log(el("div", "user", text));
  $("message").value = "";
  state.sentAt = performance.now();
  setState("running", "starting…");
  try {
    if (state.sid && state.ended) {
      const r = await api(`/v1/sessions/${state.sid}/messages`, { content: text, max_turns: +$("max-turns").value });
      connect(r.after);
    } else {
      await createSession(text);
    }
  } catch (e) { note("error: " + e.message, "error"); setState("idle"); }
}

async function createSession(text) {
  const body = { messages: [{ role: "user", content: text }], max_turns: +$("max-turns").value,
                 max_tokens: +$("max-tokens").value,
                 tools: [...$("tools").querySelectorAll("input:checked")].map((b) => b.value) };
  const replay = $("replay").value.trim();
  if (replay) body.replay = JSON.parse(replay);
  const r = await api("/v1/sessions", body);
  state.sid = r.id; state.turns.clear();
  note(`session ${r.id}`);
  connect("0-0");
}

function connect(after) {
  state.ended = false; state.lastId = after;
  const key = apiKey();
  const protocols = ["turnstream.v1"];
  let url = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/v1/sessions/${state.sid}/ws?after=${after}`;
  if (key && /^[A-Za-z0-9._~-]+$/.test(key)) protocols.push("bearer." + key);
  else if (key) url += "&token=" + encodeURIComponent(key);
  const ws = new WebSocket(url, protocols);
  state.ws = ws;
  ws.onopen = () => { state.retries = 0; setState("running", "streaming"); };
  ws.onmessage = (m) => onFrame(JSON.parse(m.data));
  ws.onclose = (c) => onClose(ws, c);
}

function onClose(ws, c) {
  if (ws !== state.ws || state.ended) return;
  if (state.retries++ > 5) { note(`connection lost (${c.code}); giving up`, "error"); setState("idle"); return; }
  note(`connection closed (${c.code}${c.reason ? ": " + c.reason : ""}); resuming after ${state.lastId}`);
  setTimeout(() => connect(state.lastId), 300 * state.retries);
}

async function cancel() {
  if (state.ws && state.ws.readyState === WebSocket.OPEN) state.ws.send(JSON.stringify({ type: "cancel" }));
  else if (state.sid) await api(`/v1/sessions/${state.sid}/cancel`, {}).catch(() => {});
}

function reset() {
  if (state.ws) { state.ended = true; state.ws.close(); }
  Object.assign(state, { sid: null, lastId: "0-0", ws: null, ended: true });
  state.turns.clear();
  $("log").replaceChildren();
  setState("idle");
}

// ------------------------------------------------------------------ events
function newer(id, than) {
  const [a, b] = id.split("-").map(Number), [c, d] = than.split("-").map(Number);
  return a > c || (a === c && b > d);
}

function onFrame(f) {
  if (!f.body) { if (f.type === "error") note("refused: " + f.error.message, "error"); return; }
  if (!newer(f.id, state.lastId)) return; // already shown (defensive: the server sends each event once)
  state.lastId = f.id;
  const handler = handlers[f.body.type];
  if (handler) handler(f.body, f);
}

function turnOf(f) {
  let t = state.turns.get(f.turn);
  if (!t) {
    const root = log(el("div", "turn"));
    root.dataset.turn = f.turn;
    const head = el("div", "turn-head");
    const body = el("div", "turn-body");
    const foot = el("div", "turn-foot");
    root.append(head, body, foot);
    t = { root, head, body, foot, content: null, reasoning: null, calls: new Map(), started: null, first: null };
    head.append(el("b", null, `turn ${f.turn}`));
    state.turns.set(f.turn, t);
  }
  return t;
}

function firstToken(t, f) {
  if (t.first !== null) return;
  t.first = f.ts;
  if (state.sentAt) {
    t.head.append(el("span", "badge ttft", "first token " + Math.round(performance.now() - state.sentAt) + " ms"));
    state.sentAt = 0;
  }
}

function textBlock(t, key, cls) {
  if (!t[key]) t[key] = t.body.appendChild(el("div", cls));
  return t[key];
}

function callOf(t, index) {
  return t.calls.get(index);
}

const handlers = {
  "turn.started": (b, f) => {
    const t = turnOf(f);
    t.started = f.ts;
    const pct = b.prompt_tokens ? Math.round((100 * b.cached_tokens) / b.prompt_tokens) : 0;
    const kv = el("span", "kv");
    const bar = el("span", "bar"); const fill = el("i"); fill.style.width = pct + "%"; bar.append(fill);
    kv.append("KV reuse", bar, el("span", "kv-text", `${b.cached_tokens} / ${b.prompt_tokens} prompt tokens (${pct}%)`));
    kv.dataset.cached = b.cached_tokens; kv.dataset.prompt = b.prompt_tokens;
    t.head.append(kv, el("span", "badge", b.worker || "decoder"));
    if (b.continuation) t.head.append(el("span", "badge", "continuation"));
  },
  "reasoning.delta": (b, f) => { const t = turnOf(f); firstToken(t, f); textBlock(t, "reasoning", "reasoning").textContent += b.text; },
  "content.delta": (b, f) => {
    const t = turnOf(f); firstToken(t, f);
    if (!t.content && !b.text.trim()) { t.pendingSpace = (t.pendingSpace || "") + b.text; return; } // no empty blocks
    textBlock(t, "content", "content").textContent += (t.pendingSpace || "") + b.text;
    t.pendingSpace = "";
  },
  "tool_call.begin": (b, f) => {
    const t = turnOf(f); firstToken(t, f);
    const call = t.body.appendChild(el("div", "call"));
    call.dataset.name = b.name; call.dataset.index = b.index; call.dataset.state = "streaming";
    const head = el("div", "call-head");
    const stateEl = el("span", "state", "streaming");
    const timing = el("span", "timing");
    head.append("⚙", el("span", "name", b.name), stateEl, timing);
    const args = el("pre", "args");
    call.append(head, args);
    t.calls.set(b.index, { call, args, stateEl, timing, ready: null });
    t.content = null; t.pendingSpace = ""; // text after a call starts a new block
  },
  "tool_call.args": (b, f) => { const c = callOf(turnOf(f), b.index); if (c) c.args.textContent += b.delta; },
  "tool_call.ready": (b, f) => {
    const c = callOf(turnOf(f), b.index); if (!c) return;
    c.ready = f.ts; c.args.textContent = b.arguments;
    setCall(c, "ready", "ready");
  },
  "tool_call.invalid": (b, f) => {
    const c = callOf(turnOf(f), b.index); if (!c) return;
    setCall(c, "invalid", b.truncated ? "truncated" : "invalid: " + b.error);
  },
  "tool.started": (b, f) => {
    const c = callOf(turnOf(f), b.index); if (!c) return;
    setCall(c, "running", "running" + (b.worker ? " on " + b.worker : ""));
    if (c.ready) c.timing.textContent = "dispatched " + ms(f.ts - c.ready) + " after ready";
  },
  "tool.result": (b, f) => {
    const c = callOf(turnOf(f), b.index); if (!c) return;
    setCall(c, b.is_error ? "error" : "done", b.is_error ? "error" : "done");
    c.timing.textContent += (c.timing.textContent ? " · " : "") + "ran " + Math.round(b.duration_ms) + " ms";
    const result = c.call.appendChild(el("pre", "result", b.content));
    result.dataset.result = "1";
  },
  "turn.ended": (b, f) => {
    const t = turnOf(f);
    const secs = t.started ? f.ts - t.started : 0;
    const rate = secs > 0 ? Math.round(b.completion_tokens / secs) : 0;
    t.foot.textContent = `${b.finish_reason} · ${b.completion_tokens} tokens in ${ms(secs)} (${rate} tok/s)` +
      (b.n_calls ? ` · ${b.n_calls} call${b.n_calls > 1 ? "s" : ""}` : "");
    t.root.dataset.finish = b.finish_reason;
  },
  "turn.restarted": (b, f) => {
    const t = turnOf(f);
    t.body.replaceChildren(); t.content = t.reasoning = null; t.calls.clear();
    note(`turn ${f.turn} restarted: ${b.reason}`);
  },
  "error": (b) => note("error: " + b.message, "error"),
  "session.ended": (b) => {
    state.ended = true;
    const end = log(el("div", "ended", `session ended: ${b.reason}`));
    end.dataset.reason = b.reason;
    setState("ended", "ended: " + b.reason);
  },
};

function setCall(c, s, label) { c.call.dataset.state = s; c.stateEl.textContent = label; }

$("composer").addEventListener("submit", send);
$("cancel").addEventListener("click", cancel);
$("new").addEventListener("click", reset);
$("key").value = localStorage.getItem("turnstream-key") || "";
$("key").addEventListener("change", () => { localStorage.setItem("turnstream-key", apiKey()); loadTools(); });
loadTools();
