// One turn of a transcript as the reader sees it: its head (KV reuse, worker, badges), its
// text and reasoning, each tool call with labelled arguments and result, and a footer that says
// how the turn finished.  CallView and TurnView only draw; Transcript (view.js) decides when.
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
export class TurnView {
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

