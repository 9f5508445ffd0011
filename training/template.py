"""The Qwen2.5/Hermes-style chat template (compact tool list) and a renderer identical to HF's."""

from __future__ import annotations

import json
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

DEFAULT_SYSTEM = "You are a helpful assistant."

CHAT_TEMPLATE = """\
{%- if messages[0].role == 'system' %}{%- set system = messages[0].content %}{%- set rest = messages[1:] %}
{%- else %}{%- set system = '""" + DEFAULT_SYSTEM + """' %}{%- set rest = messages %}{%- endif %}
{{- '<|im_start|>system\\n' + system }}
{%- if tools %}
{{- '\\n# Tools\\n<tools>' }}
{%- for tool in tools %}{%- set f = tool.function if tool.function is defined else tool %}
{{- '\\n' + f.name + '(' }}
{%- for name in f.parameters.properties %}{{ ', ' if not loop.first }}{{ name }}{{ '?' if name not in (f.parameters.required or []) }}{%- endfor %}
{{- ')' }}
{%- endfor %}
{{- '\\n</tools>' }}
{%- endif %}
{{- '<|im_end|>\\n' }}
{%- for message in rest %}
{%- if message.role == 'user' or (message.role == 'assistant' and not message.tool_calls) %}
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant' }}
{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}
{%- for tc in message.tool_calls %}{%- set tc = tc.function if tc.function is defined else tc %}
{{- '\\n<tool_call>\\n{"name": "' + tc.name + '", "arguments": ' }}
{%- if tc.arguments is string %}{{- tc.arguments }}{%- else %}{{- tc.arguments | tojson }}{%- endif %}
{{- '}\\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\\n' }}
{%- elif message.role == 'tool' %}
{%- if loop.first or rest[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}
{%- if loop.last or rest[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""


def _tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _compile() -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = _tojson
    return env.from_string(CHAT_TEMPLATE)


_TEMPLATE = _compile()


def render(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
           add_generation_prompt: bool = False) -> str:
    """Render a conversation exactly as ``tokenizer.apply_chat_template(..., tokenize=False)`` does."""
    return _TEMPLATE.render(messages=messages, tools=tools, add_generation_prompt=add_generation_prompt)
