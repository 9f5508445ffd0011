"""``Constraint`` -> a Lark grammar in llguidance's dialect, for one tokenizer's added tokens.

    start    (REQUIRED)   think? WS section
             (ALLOWED)    think? WS (answer | section)              with an answer schema
                          think? SAFE (section SAFE)*               call openers are added tokens
                          think? pre_call* SAFE                     call openers are text
             (FORBIDDEN)  think? WS answer  |  think? SAFE

``WS`` is at most four blanks (free whitespace lets a model pad forever).  ``SAFE`` is any text
that does not contain a call opener (``Syntax.opener_re``), so a call can
only begin inside ``section``, whose rules name an offered tool and hold the arguments to its
schema.  A text opener is matched as part of one lexeme ``PRE_i = SAFE + head of call i`` (text
lexemes are greedy: a separate opener lexeme after SAFE would never be reached).  Added tokens
(``<[id]>``) never occur in text, so a token opener needs no such care.  A format whose content
sits in wrappers that are added tokens (``Syntax.content_marks``: kimi_k3) gets them around SAFE
(``free``) and, under REQUIRED, before and after its section.
"""

from __future__ import annotations

from runtime.reasoning_markers import THINK, think_markers
from workers.decode.constraints.args import arguments
from workers.decode.constraints.formats import HARMONY_CALL, HARMONY_OPENER_RE, KIMI_INDEX_OPEN, NAME, SYNTAX, Syntax
from workers.decode.constraints.pieces import ANY, Pieces, json_rule, lit
from workers.decode.constraints.spec import Calls, Constraint, ConstraintError

_SAFE = "SAFE: " + ANY + r" & ~/(.|\n)*({})(.|\n)*/"


def to_lark(c: Constraint, added: dict[str, int]) -> str:
    """The grammar of ``c`` for a tokenizer whose added tokens are ``added`` (text -> id)."""
    if c.grammar is not None:
        return c.grammar
    p = Pieces(added)
    if c.format == "harmony":
        return _harmony(c, p)
    syntax = SYNTAX.get(c.format)
    if syntax is None:
        raise ConstraintError(f"tool format {c.format!r} has no call grammar")
    rules = [_SAFE.format(syntax.opener_re), r"WS: /[ \t\n]{0,4}/"]  # bounded: a model must not pad forever
    think = _think(c, p, rules, syntax.opener_re, think_markers(c.format))
    free, marks = _free(syntax, p, rules)
    if c.calls is Calls.FORBIDDEN:
        start = "WS answer" if c.answer_schema is not None else free
    elif c.calls is Calls.REQUIRED or c.answer_schema is not None:
        start = f"WS {marks}section {marks}" if c.calls is Calls.REQUIRED else "WS (answer | section)"
        rules += _section(c, syntax, p)
    elif p.text_lead(syntax.section_open[0] if syntax.section_open else syntax.call_open[0])[0]:
        start = "pre_call* SAFE"
        rules += _text_triggered(c, syntax, p)
    else:
        start = f"{free} (section {free})*"
        rules += _section(c, syntax, p)
    if c.answer_schema is not None:
        rules.append(f"answer: {json_rule(c.answer_schema)}")
    return _grammar([f"start: {think} {start}"] + rules)


def _free(s: Syntax, p: Pieces, rules: list[str]) -> tuple[str, str]:
    """(free text, the format's content wrappers around a required section): ``SAFE`` (which holds the
    wrappers when they are text), or where they are added tokens (kimi_k3's ``<|open|>response<|sep|>``),
    SAFE with those wrappers anywhere around it."""
    if not s.content_marks:
        return "SAFE", ""
    rules.append(f"mark: {' | '.join(p.expr(m) for m in s.content_marks)}")
    if p.is_text("".join(s.content_marks)):
        return "SAFE", "mark* "
    rules.append("free: SAFE (mark SAFE)*")
    return "free", "mark* "


def _grammar(rules: list[str]) -> str:
    return "\n".join(["%llguidance {}"] + list(dict.fromkeys(rules))) + "\n"


# ---- sections of calls ----------------------------------------------------------------------
def _section(c: Constraint, s: Syntax, p: Pieces) -> list[str]:
    more = f"({p.expr(*s.joiner)} call)*" if c.parallel else ""
    rules = [f"section: {p.expr(*s.section_open)} call {more} {p.expr(*s.section_close)}"]
    return rules + _calls(c, s, p)


def _text_triggered(c: Constraint, s: Syntax, p: Pieces) -> list[str]:
    """ALLOWED with a text opener: PRE_i (free text + the head of call i) starts each section."""
    more = f"({p.expr(*s.joiner)} call)*" if c.parallel else ""
    rules = [f"pre_call: {' | '.join(f'PRE_{i} rest_{i}' for i in range(len(c.tools)))}"]
    for i, tool in enumerate(c.tools):
        head = "".join(piece.replace(NAME, tool.name) for piece in s.section_open + s.call_open)
        lead, rest = p.text_lead(head)  # the text up to an added token (minimax_m3's marker as text) is the lexeme's
        rules += [f"PRE_{i}: SAFE {lit(lead)}", f"rest_{i}: {p.expr(rest)} args_of_{i} {more} {p.expr(*s.section_close)}"]
    return rules + _calls(c, s, p)


def _calls(c: Constraint, s: Syntax, p: Pieces) -> list[str]:
    """``call``: one of the offered tools, its head, (kimi's index,) arguments and close."""
    rules = [f"call: {' | '.join(f'call_{i}' for i in range(len(c.tools)))}"]
    index = f"/[0-9]+/ {p.expr(*(s.index_end or KIMI_INDEX_OPEN))} " if s.index else ""
    for i, tool in enumerate(c.tools):
        args, extra = arguments(tool, i, s, p)
        head = p.expr(*(piece.replace(NAME, tool.name) for piece in s.call_open))
        rules += [f"call_{i}: {head} args_of_{i}", f"args_of_{i}: {index}{args} {p.expr(*s.call_close)}"] + extra
    return rules


# ---- reasoning and harmony -------------------------------------------------------------------
def _think(c: Constraint, p: Pieces, rules: list[str], opener_re: str, markers: tuple[str, str] = THINK) -> str:
    """The reasoning span; no call may begin inside it (the parser would take it for a call)."""
    if c.reasoning is None:
        return ""
    open_, close = markers
    body, rule = p.until("think_body", close, opener_re)
    rules.append(rule)
    if c.reasoning == "think_forced":  # the prompt opened the span: the turn starts inside it
        return body
    rules.append(f"think: {p.expr(open_)} {body}")
    return "think?"


def _harmony(c: Constraint, p: Pieces) -> str:
    """gpt-oss: analysis messages, then a final answer or calls (``<|call|>``/``<|return|>`` may end it)."""
    ends = {Calls.FORBIDDEN: "final", Calls.ALLOWED: "final | call", Calls.REQUIRED: "call"}[c.calls]
    body = "answer" if c.answer_schema is not None else "TEXT"
    rules = [f"start: analysis* ({ends})",
             f"analysis: {p.expr('<|channel|>', 'analysis', '<|message|>')} TEXT "
             f"{p.expr('<|end|>', '<|start|>', 'assistant')}",
             "TEXT: " + ANY + rf" & ~/(.|\n)*({HARMONY_OPENER_RE})(.|\n)*/",
             f"final: {p.expr('<|channel|>', 'final', '<|message|>')} {body}"]
    if c.calls is not Calls.FORBIDDEN:
        rules.append(f"call: {' | '.join(f'call_{i}' for i in range(len(c.tools)))}")
        for i, t in enumerate(c.tools):
            head = p.expr(*(x.replace(NAME, t.name) for x in HARMONY_CALL))
            rules += [f"call_{i}: {head} args_{i} ({p.expr('<|call|>')})?",
                      f"args_{i}: {json_rule(t.parameters)}"]
    if c.answer_schema is not None:
        rules.append(f"answer: {json_rule(c.answer_schema)}")
    return _grammar(rules)
