"""What a checkpoint says about itself: its tool-call format and reasoning mode, with the reason.

``--tool-format auto`` and ``--reasoning auto`` (the defaults) are settled here from the model
directory's own files, so that a wrong pair cannot silently turn every call into text:

    tool format   1. a marker the chat template writes   (FAMILIES, in order: the first match wins)
                  2. a special token of the tokenizer     (tokenizer_config.json added tokens)
                  3. config.json model_type / architectures
                  4. none of these: hermes, with a warning naming --tool-format
    reasoning     harmony: none (its analysis channel carries reasoning)
                  the generation prompt ends inside an open think span: think_forced
                  the template or a special token has the span's opener: think
                  otherwise: none
                  (the span is the format's: <think>, or runtime.reasoning_markers.FAMILY_THINK's)

The template outranks model_type because fine-tunes keep their base's model_type and change the
template (Hermes 3 is a ``llama``; DeepSeek-R1-Distill-Qwen a ``qwen2``; Qwen3-Coder and Qwen3
share ``qwen3_moe``); where two families write the very same markup (ERNIE 4.5 and hermes), the
template names the one whose ``model_type`` config.json has (``Family.with_type``).  Adding a family
is one ``Family`` entry; its markers are what its chat template writes around a call
(tests/runtime/test_model_info.py renders each family's real template and checks that the inferred
parser reads the call back).  Nothing here imports a stage.
"""

from __future__ import annotations

import functools
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtime.chat_template import ModelFilesError, PromptError, model_templates, render_template
from runtime.reasoning_markers import think_markers

log = logging.getLogger("turnstream.model")

AUTO = "auto"
FALLBACK_FORMAT = "hermes"


@dataclass(frozen=True)
class Family:
    """A tool-call format and the evidence that names it (any one suffices)."""

    format: str
    template: tuple[str, ...] = ()      # all of these in the chat template
    tokens: tuple[str, ...] = ()        # any of these among the tokenizer's added tokens
    model_types: tuple[str, ...] = ()   # config.json model_type or an architecture's name
    with_type: bool = False             # the template markers are another family's too: they name this
                                        # one only with one of its model_types


# Order matters where templates overlap: Seed-OSS writes Qwen3-Coder's <function=/<parameter= inside its
# own block, Qwen3-Coder and GLM also write <tool_call>, DeepSeek V3.1 and V3 share <｜tool▁calls▁begin｜>
# (V3 alone fences the arguments as ```json), Hunyuan, MiniMax-M1 and Jamba all write <tool_calls> (the
# first two each with their own turn tokens), and ERNIE 4.5 writes hermes' <tool_call> (its model_type
# decides: ``with_type``).  DeepSeek V3.2 and V4 spell their DSML tag through a template variable, so
# the source holds the variable's value and the tag's tail apart.
FAMILIES: tuple[Family, ...] = (
    Family("harmony", template=("<|channel|>",), tokens=("<|channel|>",), model_types=("gpt_oss",)),
    Family("seed_oss", template=("<seed:tool_call>",), tokens=("<seed:tool_call>",), model_types=("seed_oss",)),
    Family("qwen3_coder", template=("<function=", "<parameter=")),  # its model_type is Qwen3's (qwen3_moe)
    Family("glm45", template=("<arg_key>", "<arg_value>"), model_types=("glm4_moe",)),
    Family("minimax_m2", template=("<minimax:tool_call>",), tokens=("<minimax:tool_call>",),
           model_types=("minimax_m2",)),
    Family("kimi_k2", template=("<|tool_calls_section_begin|>",), tokens=("<|tool_calls_section_begin|>",),
           model_types=("kimi_k2",)),
    Family("deepseek_v3", template=("<｜tool▁calls▁begin｜>", "```json"), model_types=("deepseek_v3",)),
    Family("deepseek_v31", template=("<｜tool▁calls▁begin｜>",)),  # its tokens and model_type are V3's
    Family("deepseek_v4", template=("｜DSML｜", "tool_calls>"), model_types=("deepseek_v4",)),
    Family("deepseek_v32", template=("｜DSML｜", "function_calls>"), model_types=("deepseek_v32",)),
    Family("step3", template=("<steptml:invoke",), tokens=("<｜tool_calls_begin｜>",),
           model_types=("step3", "step3_vl")),
    Family("longcat", template=("<longcat_tool_call>",), tokens=("<longcat_tool_call>",),
           model_types=("longcat_flash",)),
    Family("internlm", template=("<|action_start|>", "<|plugin|>"), tokens=("<|action_start|>",),
           model_types=("internlm2", "internlm3")),
    Family("hunyuan_a13b", template=("<tool_calls>", "<|extra_0|>"), model_types=("hunyuan_v1_moe",)),
    Family("minimax_m1", template=("<tool_calls>", "<beginning_of_sentence>"),
           model_types=("minimax_m1", "minimax_text_01")),
    Family("jamba", template=("<tool_calls>",), model_types=("jamba",)),
    Family("cohere_command", template=("<|START_ACTION|>",), tokens=("<|START_ACTION|>",), model_types=("cohere2",)),
    Family("phi4_mini_json", template=("functools[",), model_types=("phi3",)),
    # Granite 3.x; Granite 4 writes hermes' <tool_call> between the same role tokens
    Family("granite", template=("<|tool_call|>", "<|start_of_role|>"), model_types=("granite", "granitemoe")),
    Family("gigachat3", template=("<|role_sep|>", "function call"), tokens=("<|role_sep|>", "<|function_call|>")),
    Family("apertus", template=("<|tools_prefix|>",), tokens=("<|tools_prefix|>",), model_types=("apertus",)),
    Family("lfm2", template=("<|tool_call_start|>",), tokens=("<|tool_call_start|>",),
           model_types=("lfm2", "lfm2_moe")),
    Family("olmo3", template=("<function_calls>",), model_types=("olmo3",)),
    # Gemma 4: gemma4 (Gemma4ForConditionalGeneration), gemma4_text (Gemma4ForCausalLM), gemma4_unified
    Family("gemma4", template=("<|tool_call>call:",), tokens=("<|tool_call>",),
           model_types=("gemma4", "gemma4_text", "gemma4_unified", "gemma4_unified_text")),
    Family("xlam", template=("xLAM",)),  # bare JSON lists: only the template's own name tells it apart
    # MiniMax-M3 also writes <tool_call> (behind its marker): before hermes; minimax_m3_sparse names the
    # MiniMaxM3Sparse* architectures (vLLM's registry), the VL checkpoint's model_type is minimax_m3_vl
    Family("minimax_m3", template=("]<]minimax[>[",), tokens=("]<]minimax[>[",),
           model_types=("minimax_m3_vl", "minimax_m3_text", "minimax_m3_sparse")),
    Family("kimi_k3", template=("<|open|>", "<|sep|>", "<|close|>"), model_types=("kimi_k3",)),
    Family("mistral", template=("[TOOL_CALLS]",), tokens=("[TOOL_CALLS]",),
           model_types=("mistral", "mistral3", "mixtral")),
    Family("pythonic", template=("[func_name1(",), model_types=("llama4",)),
    Family("llama3_json", template=('"parameters": dictionary of argument name and its value',),
           tokens=("<|python_tag|>",), model_types=("llama",)),
    Family("ernie45", template=("<tool_call>",), model_types=("ernie4_5_moe", "ernie4_5"), with_type=True),
    Family("hermes", template=("<tool_call>",), tokens=("<tool_call>",), model_types=("qwen2", "qwen3", "qwen3_moe")),
    Family("hermes", model_types=("granitemoehybrid",)),  # Granite 4.0 (H and micro): hermes' <tool_call>
    # FunctionGemma's model_type is plain Gemma 3's (gemma3_text): only its own call token tells it apart
    Family("functiongemma", template=("<start_function_call>",), tokens=("<start_function_call>",)),
    Family("deepseek_v41", template=("｜DSML｜", " calls>"), model_types=("deepseek_v41",)),  # V4's DSML, tags spaced
    # Without a template: GLM-4.7's call format is GLM-4.7-Flash's type's and Ling 3's architecture's (its model_type,
    # bailing_hybrid, is Ling 2.5's too); Qwen3-Coder's is Step-3.5's and 3.7's (Nemotron 3's nemotron_h is also
    # Nemotron-H's and Nano 2's: its template decides); MiMo V2's (no template reached: vLLM's and xgrammar's mimo).
    Family("glm45", model_types=("glm4_moe_lite", "bailing_moe_v3")),
    Family("qwen3_coder", model_types=("step3p5", "step3p7")),
    Family("mimo", model_types=("mimo_v2", "mimo_v2_flash")),
)


@dataclass(frozen=True)
class Checkpoint:
    """The files of a model directory that say what it is."""

    model_type: str = ""
    architectures: tuple[str, ...] = ()
    template: str = ""              # every named template, concatenated
    tokens: frozenset[str] = field(default_factory=frozenset)
    prompt: str = ""                # one user message's prompt, generation prompt added ("" if it cannot render)

    @classmethod
    def read(cls, model_dir: str | Path) -> "Checkpoint":
        path = Path(model_dir)
        config = _json(path / "config.json")
        tok = _json(path / "tokenizer_config.json")
        try:
            templates, specials = model_templates(path)
        except ModelFilesError:
            templates, specials = {}, {}
        template = "\n".join(templates.values())
        added = frozenset(t["content"] for t in (tok.get("added_tokens_decoder") or {}).values()
                          if isinstance(t, dict) and "content" in t)
        return cls(str(config.get("model_type") or ""), tuple(config.get("architectures") or ()), template,
                   added, _prompt(templates, specials))


@dataclass(frozen=True)
class Inference:
    """A settled format and reasoning mode, each with why; ``known`` is False for the fallback."""

    tool_format: str
    format_reason: str
    reasoning: str
    reasoning_reason: str
    known: bool = True


def infer(model_dir: str | Path) -> Inference:
    """The tool-call format and reasoning mode the checkpoint at ``model_dir`` names."""
    return _infer_cached(str(Path(model_dir).resolve()))


@functools.lru_cache(maxsize=32)
def _infer_cached(model_dir: str) -> Inference:
    ckpt = Checkpoint.read(model_dir)
    fmt, why, known = tool_format_of(ckpt)
    reasoning, reasoning_why = reasoning_of(ckpt, fmt)
    return Inference(fmt, why, reasoning, reasoning_why, known)


def tool_format_of(ckpt: Checkpoint) -> tuple[str, str, bool]:
    """(format, reason, known): the first family whose evidence the checkpoint shows."""
    names = (ckpt.model_type, *ckpt.architectures)
    for fam in FAMILIES:
        if fam.template and all(m in ckpt.template for m in fam.template):
            why = f"the chat template writes {' and '.join(map(repr, fam.template))}"
            if not fam.with_type:
                return fam.format, why, True
            if hit := _type_of(names, fam):
                return fam.format, f"{why} and config.json names {hit!r}", True
    for fam in FAMILIES:
        if hit := next((t for t in fam.tokens if t in ckpt.tokens), None):
            return fam.format, f"the tokenizer has the special token {hit!r}", True
    for fam in FAMILIES:
        if hit := _type_of(names, fam):
            return fam.format, f"config.json names {hit!r}", True
    return FALLBACK_FORMAT, "no known tool-call markup in the chat template, tokens or config.json", False


def reasoning_of(ckpt: Checkpoint, fmt: str) -> tuple[str, str]:
    """(mode, reason): think_forced when the generation prompt leaves the format's think span open
    (``runtime.reasoning_markers`` names the span: ``<think>``, Seed-OSS's ``<seed:think>`` ...)."""
    if fmt == "harmony":
        return "", "harmony carries reasoning in its analysis channel"
    opener = think_markers(fmt)[0]
    tail = ckpt.prompt.rstrip()
    if tail.endswith(opener):
        return "think_forced", f"the generation prompt opens {opener!r}"
    if opener in ckpt.template:
        return "think", f"the chat template writes {opener!r}"
    if opener in ckpt.tokens:
        return "think", f"the tokenizer has the special token {opener!r}"
    return "", f"no {opener!r} in the chat template or tokens"


def settle(cfg: Any) -> tuple[Any, list[str]]:
    """``cfg`` (a ``runtime.config.Config``) with ``auto`` replaced by what the model directory names,
    and the start-up lines saying what was chosen and why (a warning line starts with ``warning:``)."""
    if AUTO not in (cfg.tool_format, cfg.reasoning):
        return cfg, []
    inf = infer(cfg.model)
    fmt = inf.tool_format if cfg.tool_format == AUTO else cfg.tool_format
    reasoning = inf.reasoning if cfg.reasoning == AUTO else cfg.reasoning
    lines = []
    if cfg.tool_format == AUTO:
        lines.append(f"tool format {fmt}: {inf.format_reason}" if inf.known else
                     f"warning: tool format {fmt} (a guess: {inf.format_reason}); set --tool-format "
                     "(TURNSTREAM_TOOL_FORMAT) to the model's format")
    if cfg.reasoning == AUTO:
        lines.append(f"reasoning {reasoning or 'none'}: {inf.reasoning_reason}")
    return cfg.replace(tool_format=fmt, reasoning=reasoning), lines


def report(lines: list[str]) -> None:
    """Log ``settle``'s lines (warnings as warnings)."""
    for line in lines:
        if line.startswith("warning: "):
            log.warning("%s", line.removeprefix("warning: "))
        else:
            log.info("%s", line)


def _type_of(names: tuple[str, ...], fam: Family) -> str | None:
    """The first of config.json's ``names`` (model_type, architectures) that is one of ``fam``'s types."""
    return next((n for n in names if n and _names_type(n, fam.model_types)), None)


def _names_type(name: str, model_types: tuple[str, ...]) -> bool:
    """``name`` is one of ``model_types``, or an architecture class of one (``Qwen3ForCausalLM``)."""
    flat = name.lower().replace("_", "")
    return any(name == t or flat.startswith(t.replace("_", "") + "for") for t in model_types)


def _prompt(templates: dict[str, str], specials: dict[str, str]) -> str:
    source = templates.get("default") or next(iter(templates.values()), "")
    if not source:
        return ""
    try:
        return render_template(source, specials, [{"role": "user", "content": "hi"}])
    except (PromptError, TypeError, ValueError):  # a template that needs more than one user message
        return ""


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
