// The transcript: renders session events ({turn, ts, body: {type, ...}}, the session API's
// shape; other routes are translated into it by routes.js) as user messages, turns with their
// text and tool calls, an end-of-session banner, and the session's totals.
//
// A session.ended "cancelled" or "error" freezes the turns it covers: every call still
// streaming or waiting is marked with the session's fate, an unfinished turn gets a footer
// saying so, and later stragglers of those turns (the pipeline flushing a cancelled turn) are
// not drawn, except the result of a call that had been dispatched: that tool did run.
"use strict";

export function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

/** JSON text spaced for reading (on one line when short, else indented); anything else unchanged. */
export function pretty(text) {
  let value;
  try { value = JSON.parse(text); } catch { return text; }
  const line = JSON.stringify(value, null, 1).replace(/\n\s*/g, " ");
  return line.length <= SHORT_JSON ? line : JSON.stringify(value, null, 2);
}
const SHORT_JSON = 90;

const ms = (seconds) => Math.round(seconds * 1000) + " ms";
const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;

const TURN_FINISH = {
  stop: "answered", tool_calls: "called tools", length: "cut off at the max tokens limit",
  abort: "cancelled", error: "failed",
};
const SESSION_END = {
  stop: ["done", "Done: the model answered."],
  max_turns: ["stopped", "Stopped: the session reached its turn limit before a final answer."],
  cancelled: ["cancelled", "Cancelled: you stopped the session."],
  error: ["failed", "Failed: the session ended with an error."],
  tool_calls: ["done", "Done: the model's tool calls were returned to the client, which runs them."],
};
/** [page state, sentence] for a session.ended reason. */
export function sessionEnd(reason) {
  return SESSION_END[reason] || ["done", `Ended (${reason}).`];
}

// ------------------------------------------------------------------ one tool call
class CallView {
  constructor(b, parent) {
    this.root = parent.appendChild(el("div", "call"));
    this.root.dataset.name = b.name; this.root.dataset.index = b.index;
    this.pill = el("span", "state");
    this.timing = el("span", "timing");
    const head = el("div", "call-head");
    head.append(el("span", "gear", "⚙"), el("span", "name", b.name), this.pill, this.timing);
    this.args = el("pre", "args");
    this.root.append(head, labelled("arguments", this.args));
    this.readyAt = null;
    this.set("streaming", "writing arguments…");
  }

  set(state, label) { this.root.dataset.state = state; this.pill.textContent = label; }
  get state() { return this.root.dataset.state; }

  addArgs(delta) { this.args.textContent += delta; }
  ready(b, ts) { this.readyAt = ts; this.args.textContent = pretty(b.arguments); this.set("ready", "queued"); }
  invalid(b) { this.set("invalid", b.truncated ? "cut off: not run" : "invalid: not run"); this.note(b.error); }
  started(b, ts) {
    this.set("running", "running" + (b.worker ? " on " + b.worker : ""));
    if (this.readyAt !== null) this.timing.textContent = "dispatched " + ms(ts - this.readyAt) + " after ready";
  }
  result(b) {
    this.set(b.is_error ? "error" : "done", b.is_error ? "error" : "done");
    this.timing.textContent += (this.timing.textContent ? " · " : "") + "ran " + Math.round(b.duration_ms) + " ms";
    const out = el("pre", "result", pretty(b.content));
    this.root.append(labelled(b.is_error ? "error" : "result", out, "result-part"));
  }
  /** The session ended before this call finished: say what became of it. */
  close(reason) {
    if (!["streaming", "ready", "running"].includes(this.state)) return;
    const fate = reason === "cancelled" ? "cancelled" : "failed";
    this.set(fate, `${fate}: ${this.state === "streaming" ? "arguments cut off" : "no result"}`);
  }
  note(text) { if (text) this.root.append(el("div", "call-note", text)); }
  /** Chat completions: the call is the client's to run; a box takes the result to send back. */
  returned() {
    this.set("returned", "returned to you");
    this.answer = el("textarea", "client-result");
    this.answer.rows = 2; this.answer.placeholder = "result to send back with your next message (optional)";
    this.root.append(labelled("your result", this.answer, "result-part"));
  }
}

function labelled(label, node, cls) {
  const part = el("div", cls || "part");
  part.append(el("span", "label", label), node);
  return part;
}

// ------------------------------------------------------------------ one turn
class TurnView {
  constructor(n, parent) {
    this.n = n;
    this.root = parent.appendChild(el("div", "turn"));
    this.root.dataset.turn = n;
    this.head = el("div", "turn-head"); this.body = el("div", "turn-body"); this.foot = el("div", "turn-foot");
    this.root.append(this.head, this.body, this.foot);
    this.head.append(el("b", null, `turn ${n}`));
    this.calls = new Map(); this.kv = null;
    this.text = null; this.reasoning = null; this.space = "";
    this.tally = { prompt: 0, cached: 0, completion: 0, calls: 0 };
    this.started = null; this.ended = false; this.frozen = false;
  }

  begin(b, ts) {
    this.started = ts;
    this.kv = this.head.appendChild(el("span", "kv"));
    this.usage(b);
    this.head.append(el("span", "badge", b.worker || "decoder"));
    if (b.continuation) this.head.append(el("span", "badge", "continuation"));
  }
  usage(b) {
    if (!this.kv) this.kv = this.head.appendChild(el("span", "kv"));
    Object.assign(this.tally, { prompt: b.prompt_tokens, cached: b.cached_tokens });
    const pct = b.prompt_tokens ? Math.round((100 * b.cached_tokens) / b.prompt_tokens) : 0;
    const bar = el("span", "bar"); const fill = bar.appendChild(el("i")); fill.style.width = pct + "%";
    this.kv.replaceChildren("KV reused", bar,
      el("span", "kv-text", `${b.cached_tokens} of ${b.prompt_tokens} prompt tokens (${pct}%)`));
    this.kv.dataset.cached = b.cached_tokens; this.kv.dataset.prompt = b.prompt_tokens;
  }
  firstToken(label) { if (label) this.head.append(el("span", "badge ttft", label)); }

  addText(kind, s) {
    if (kind === "reasoning") { this.block("reasoning").textContent += s; return; }
    if (!this.text && !s.trim()) { this.space += s; return; } // no empty blocks
    this.block("text").textContent += this.space + s;
    this.space = "";
  }
  block(kind) {
    if (!this[kind]) this[kind] = this.body.appendChild(el("div", kind === "text" ? "content" : "reasoning"));
    return this[kind];
  }

  callBegin(b) {
    this.calls.set(b.index, new CallView(b, this.body));
    this.tally.calls = this.calls.size;
    this.text = null; this.space = ""; // text after a call starts a new block
  }
  call(index) { return this.calls.get(index); }

  end(b, ts) {
    this.ended = true;
    this.tally.completion = b.completion_tokens;
    this.root.dataset.finish = b.finish_reason;
    const secs = this.started !== null ? ts - this.started : 0;
    const rate = secs > 0 ? Math.round(b.completion_tokens / secs) : 0;
    const what = b.finish_reason === "tool_calls" ? `called ${plural(b.n_calls, "tool")}`
      : TURN_FINISH[b.finish_reason] || b.finish_reason;
    this.foot.textContent = `${what} · ${b.completion_tokens} tokens in ${ms(secs)} (${rate} tok/s)`;
  }
  restart(reason) {
    this.head.replaceChildren(el("b", null, `turn ${this.n}`)); this.kv = null; // its turn.started comes again
    this.body.replaceChildren(); this.calls.clear(); this.tally.calls = 0;
    this.text = this.reasoning = null; this.space = "";
    this.body.append(el("div", "note", `regenerating this turn: ${reason}`));
  }
  /** The session ended (cancelled, failed) with this turn unfinished, or its calls unanswered. */
  close(reason) {
    this.frozen = true;
    for (const c of this.calls.values()) c.close(reason);
    if (this.ended) return;
    this.root.dataset.finish = reason;
    this.foot.textContent = reason === "cancelled" ? "cancelled before the turn finished"
      : "failed before the turn finished";
  }
  markFinal() {
    this.root.classList.add("final");
    this.head.append(el("span", "badge answer", "final answer"));
  }
}

// ------------------------------------------------------------------ the transcript
export class Transcript {
  constructor(log, totals) {
    this.log = log; this.totalsEl = totals; this.pinned = true;
    log.addEventListener("scroll", () => { this.pinned = log.scrollHeight - log.scrollTop - log.clientHeight < 40; });
    this.reset();
  }

  reset() {
    this.turns = new Map(); this.exchanges = []; this.firstTokenFrom = 0; this.sid = null; this.lastTs = 0;
    this.lastError = "";
    this.log.replaceChildren();
    this.renderTotals();
  }

  append(node) { return this.log.appendChild(node); }
  /** Keep the newest output in view, unless the reader scrolled up. */
  follow() { if (this.pinned) this.log.scrollTop = this.log.scrollHeight; }
  note(text, cls) {
    const node = this.append(el("div", "note" + (cls ? " " + cls : ""), text));
    this.follow();
    return node;
  }

  /** A user message; ``sentAt`` (performance.now()) times the first token of the reply. */
  user(text, sentAt) {
    this.firstTokenFrom = sentAt || 0;
    const bubble = this.append(el("div", "user"));
    bubble.append(el("div", "user-text", text));
    this.pinned = true;
    this.follow();
    return bubble;
  }
  /** Mark a user message as not delivered, with the reason. */
  failed(bubble, reason) {
    bubble.classList.add("failed");
    bubble.append(el("div", "user-fail", "not sent: " + reason));
  }

  /** The session being shown, with a link to it (its id is in the page's address). */
  session(sid, href) { this.sid = sid; this.href = href; this.renderTotals(); }

  /** Rebuild from a session's event log.  ``users``: its user messages in order; one opens each
   *  exchange (the events from a first turn to a session.ended), the first exchange taking all
   *  but one per later exchange.  ``active``: the session runs now, maybe with no event yet. */
  replay(frames, users, active) {
    const { starts, open } = exchangeStarts(frames);
    const exchanges = starts.size + (active && !open ? 1 : 0);
    const queue = users.slice();
    const first = queue.splice(0, Math.max(0, queue.length - Math.max(0, exchanges - 1)));
    if (first.length) this.user(first.join("\n\n"));
    frames.forEach((f, i) => {
      if (i > 0 && starts.has(i) && queue.length) this.user(queue.shift());
      this.apply(f);
    });
    for (const u of queue) this.user(u);
  }

  /** Chat completions: the result typed for a returned call. */
  answer(turn, index) {
    const c = this.turns.get(turn)?.call(index);
    return c && c.answer ? c.answer.value.trim() : "";
  }
  lockAnswers() { for (const box of this.log.querySelectorAll(".client-result")) box.readOnly = true; }

  /** Draw one event. */
  apply(ev) {
    const handler = HANDLERS[ev.body.type];
    if (!handler) return;
    const t = ev.body.type === "session.ended" || ev.body.type === "error" ? null : this.turn(ev);
    if (t && t.frozen && !lateButReal(t, ev.body)) return;
    this.lastTs = ev.ts;
    handler.call(this, ev.body, ev, t);
    this.renderTotals();
    this.follow();
  }

  turn(ev) {
    let t = this.turns.get(ev.turn);
    if (!t) {
      t = new TurnView(ev.turn, this.log);
      this.turns.set(ev.turn, t);
      this.exchange(ev.ts);
    }
    return t;
  }
  exchange(ts) {
    const last = this.exchanges[this.exchanges.length - 1];
    if (!last || last.end !== null) this.exchanges.push({ start: ts, end: null });
  }
  firstToken(t) {
    if (!this.firstTokenFrom) return;
    t.firstToken("first token " + Math.round(performance.now() - this.firstTokenFrom) + " ms");
    this.firstTokenFrom = 0;
  }

  ended(b, ev) {
    if (b.reason === "cancelled" || b.reason === "error") {
      for (const t of this.turns.values()) if (t.n <= ev.turn) t.close(b.reason);
    }
    const last = this.exchanges[this.exchanges.length - 1];
    if (last && last.end === null) last.end = ev.ts;
    if (b.reason === "stop" && this.turns.has(ev.turn)) this.turns.get(ev.turn).markFinal();
    const [state, sentence] = sessionEnd(b.reason);
    const why = b.reason === "error" && this.lastError ? "Failed: " + this.lastError : sentence;
    const banner = this.append(el("div", "ended", why));
    banner.dataset.reason = b.reason; banner.dataset.state = state;
  }

  totals() {
    const sum = { turns: this.turns.size, calls: 0, prompt: 0, cached: 0, completion: 0, ms: 0 };
    for (const t of this.turns.values()) {
      for (const k of ["calls", "prompt", "cached", "completion"]) sum[k] += t.tally[k];
    }
    for (const x of this.exchanges) sum.ms += Math.round(((x.end ?? this.lastTs) - x.start) * 1000);
    return sum;
  }
  renderTotals() {
    const s = this.totals();
    Object.assign(this.totalsEl.dataset, Object.fromEntries(Object.entries(s).map(([k, v]) => [k, String(v)])));
    this.totalsEl.hidden = s.turns === 0 && !this.sid;
    const pct = s.prompt ? Math.round((100 * s.cached) / s.prompt) : 0;
    this.totalsEl.replaceChildren(
      stat("time", s.ms >= 1000 ? (s.ms / 1000).toFixed(2) + " s" : s.ms + " ms"),
      stat("turns", s.turns), stat("tool calls", s.calls),
      stat("tokens", `${s.completion} generated · ${s.prompt} prompt`),
      stat("KV reused", `${s.cached} of ${s.prompt} (${pct}%)`));
    if (this.sid) this.totalsEl.append(stat("session", this.sid, this.href));
  }
}

/** Indices of the frames that open an exchange, and whether the last exchange is still open. */
function exchangeStarts(frames) {
  const starts = new Set();
  let endTurn = -1, open = false;
  frames.forEach((f, i) => {
    if (!open && f.turn > endTurn) { starts.add(i); open = true; }
    if (f.body.type === "session.ended") { open = false; endTurn = f.turn; }
  });
  return { starts, open };
}

function stat(label, value, href) {
  const s = el("span", "stat");
  const v = el(href ? "a" : "b", null, String(value));
  if (href) v.href = href;
  s.append(el("span", "label", label), v);
  return s;
}

/** An event for a frozen turn that still tells the truth: the result of a dispatched call. */
function lateButReal(t, b) {
  return b.type === "tool.result" && Boolean(t.call(b.index)) && t.call(b.index).readyAt !== null;
}

const HANDLERS = {
  "turn.started"(b, ev, t) { t.begin(b, ev.ts); },
  "turn.usage"(b, ev, t) { t.usage(b); },
  "reasoning.delta"(b, ev, t) { this.firstToken(t); t.addText("reasoning", b.text); },
  "content.delta"(b, ev, t) { this.firstToken(t); t.addText("text", b.text); },
  "tool_call.begin"(b, ev, t) { this.firstToken(t); t.callBegin(b); },
  "tool_call.args"(b, ev, t) { t.call(b.index)?.addArgs(b.delta); },
  "tool_call.ready"(b, ev, t) { t.call(b.index)?.ready(b, ev.ts); },
  "tool_call.invalid"(b, ev, t) { t.call(b.index)?.invalid(b); },
  "tool_call.returned"(b, ev, t) { t.call(b.index)?.returned(); },
  "tool.started"(b, ev, t) { t.call(b.index)?.started(b, ev.ts); },
  "tool.result"(b, ev, t) { t.call(b.index)?.result(b); },
  "turn.ended"(b, ev, t) { t.end(b, ev.ts); },
  "turn.restarted"(b, ev, t) { t.restart(b.reason); },
  "error"(b) { this.lastError = b.message; this.note("error: " + b.message, "error"); },
  "session.ended"(b, ev) { this.ended(b, ev); },
};
