"""What a turn must begin with when the client requires a tool call (OpenAI ``tool_choice``).

``tool_choice: "required"`` forces the opening marker of a call in the deployment's format; a
named function also forces the call's head, up to where its arguments begin.  The decoder puts
this text after the generation prompt, the model continues from it, and the text is streamed
as the first text of the turn -- so the parser, the client and the conversation see an ordinary
call.  This fixes how a turn starts, not what the arguments say: they are the model's, checked
by the parser like any other (invalid ones become ``invalid`` calls).

A format without an opener here (``None``) falls back to prompting and filtering only.
"""

from __future__ import annotations

import json

NAME = "\x00NAME\x00"  # placeholder for the function name in a named opener

# format -> (opener for "required", opener for a named function or None)
_OPENERS: dict[str, tuple[str, str | None]] = {
    "hermes": ("<tool_call>\n", '<tool_call>\n{"name": "' + NAME + '", "arguments":'),
    "qwen3_coder": ("<tool_call>\n", "<tool_call>\n<function=" + NAME + ">\n"),
    "minimax_m2": ("<minimax:tool_call>\n", '<minimax:tool_call>\n<invoke name="' + NAME + '">\n'),
    "glm45": ("<tool_call>", "<tool_call>" + NAME + "\n"),
    "llama3_json": ('{"name": "', '{"name": "' + NAME + '", "parameters":'),
    "pythonic": ("[", "[" + NAME + "("),
    # v11+ writes [TOOL_CALLS]name{..}, older versions [TOOL_CALLS][{"name": ..}]: only the marker is common
    "mistral": ("[TOOL_CALLS]", None),
    "kimi_k2": ("<|tool_calls_section_begin|><|tool_call_begin|>functions.",
                "<|tool_calls_section_begin|><|tool_call_begin|>functions." + NAME + ":0<|tool_call_argument_begin|>"),
    "deepseek_v3": ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>",
                    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>" + NAME + "\n```json\n"),
    "deepseek_v31": ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>",
                     "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>" + NAME + "<｜tool▁sep｜>"),
    "harmony": ("<|channel|>commentary to=functions.",
                "<|channel|>commentary to=functions." + NAME + " <|constrain|>json<|message|>"),
}
_JSON_NAME = {"hermes", "llama3_json"}  # the name sits inside a JSON string


def forced_opener(fmt: str, name: str | None = None, reasoning: str | None = None) -> str | None:
    """The text a turn of format ``fmt`` must start with to call ``name`` (any tool when None).

    None when it cannot be forced: the format has no opener for this case, or the model reasons
    first (forcing the call would skip its ``<think>`` span)."""
    if reasoning or fmt not in _OPENERS:
        return None
    required, named = _OPENERS[fmt]
    if name is None:
        return required
    if named is None:
        return None
    return named.replace(NAME, json.dumps(name)[1:-1] if fmt in _JSON_NAME else name)
