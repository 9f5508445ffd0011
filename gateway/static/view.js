// The transcript: renders session events ({turn, ts, body: {type, ...}}, the session API's
// shape; other routes are translated into it by routes.js) as user messages, turns with their
// text and tool calls, an end-of-session banner, and the session's totals.
//
// A session.ended "cancelled" or "error" freezes the turns it covers: every call still
// streaming or waiting is marked with the session's fate, an unfinished turn gets a footer
// saying so, and later stragglers of those turns (the pipeline flushing a cancelled turn) are
// not drawn, except the result of a call that had been dispatched: that tool did run.
"use strict";

import { TurnView, el } from "./turn.js";

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
