"""Format inference from real checkpoints' chat templates (tests/runtime/model_fixtures, sources in its
README): each family is inferred, and the call its own template writes is read back by the inferred
parser -- so a marker table that drifts from the parsers fails here."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from runtime import chat_template, model_info
from runtime.chat_template import PromptError, model_templates, render_template
from runtime.config import load_config
from runtime.model_info import Checkpoint, infer, settle, tool_format_of
from workers.parser import FORMATS, parse_text

FIXTURES = Path(__file__).parent / "model_fixtures"
REPO = Path(__file__).resolve().parents[2]

# checkpoint -> (tool format, reasoning)
EXPECTED = {
    "Qwen--Qwen2.5-7B-Instruct": ("hermes", ""),
    "NousResearch--Hermes-3-Llama-3.1-8B": ("hermes", ""),
    "Qwen--Qwen3-0.6B": ("hermes", "think"),
    "Qwen--QwQ-32B": ("hermes", "think_forced"),
    "deepseek-ai--DeepSeek-R1-Distill-Qwen-32B": ("deepseek_v3", "think_forced"),
    "deepseek-ai--DeepSeek-V3.1": ("deepseek_v31", "think"),
    "moonshotai--Kimi-K2-Instruct": ("kimi_k2", ""),
    "Qwen--Qwen3-Coder-30B-A3B-Instruct": ("qwen3_coder", ""),
    "MiniMaxAI--MiniMax-M2": ("minimax_m2", "think_forced"),
    "zai-org--GLM-4.5": ("glm45", "think"),
    "meta-llama--Llama-3.3-70B-Instruct": ("llama3_json", ""),
    "mistralai--Mistral-Nemo-Instruct-2407": ("mistral", ""),
    "mistralai--Mistral-Small-3.2-24B-Instruct-2506": ("mistral", ""),
    "meta-llama--Llama-4-Scout-17B-16E-Instruct": ("pythonic", ""),
    "openai--gpt-oss-120b": ("harmony", ""),
    "ByteDance-Seed--Seed-OSS-36B-Instruct": ("seed_oss", "think"),
    "deepseek-ai--DeepSeek-V3.2": ("deepseek_v32", "think_forced"),
    "CohereLabs--c4ai-command-r7b-12-2024": ("cohere_command", ""),
    "LiquidAI--LFM2.5-8B-A1B": ("lfm2", "think"),
    "microsoft--Phi-4-mini-instruct": ("phi4_mini_json", ""),
    "tencent--Hunyuan-A13B-Instruct": ("hunyuan_a13b", "think"),
    "MiniMaxAI--MiniMax-M1-80k": ("minimax_m1", ""),
    "allenai--Olmo-3-7B-Instruct": ("olmo3", ""),
    "Salesforce--Llama-xLAM-2-8b-fc-r": ("xlam", ""),
    "internlm--internlm2_5-7b-chat": ("internlm", ""),
    "ai-sage--GigaChat3-10B-A1.8B": ("gigachat3", ""),
    "swiss-ai--Apertus-8B-Instruct-2509": ("apertus", "think"),
    "ibm-granite--granite-3.0-8b-instruct": ("granite", ""),
    "ibm-granite--granite-3.3-2b-instruct": ("granite", "think"),
    "deepseek-ai--DeepSeek-V4-Flash": ("deepseek_v4", "think"),
    "ai21labs--AI21-Jamba-Mini-1.7": ("jamba", ""),
    "meituan-longcat--LongCat-Flash-Chat": ("longcat", "think"),
    "ibm-granite--granite-4.0-h-small": ("hermes", ""),
    "zai-org--GLM-4.7-Flash": ("glm45", "think_forced"),
    "inclusionAI--Ling-3.0-flash": ("glm45", "think_forced"),
    "stepfun-ai--Step-3.5-Flash": ("qwen3_coder", "think_forced"),
    "stepfun-ai--Step-3.7-Flash": ("qwen3_coder", "think_forced"),
    "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": ("qwen3_coder", "think_forced"),
    "deepseek-ai--DeepSeek-V4.1-Flash": ("deepseek_v41", "think"),
    "MiniMaxAI--MiniMax-M3": ("minimax_m3", "think"),
    "moonshotai--Kimi-K3": ("kimi_k3", "think_forced"),
    "google--gemma-4-31B-it": ("gemma4", "think"),
}
# Templates that do not write a past call in the markup the model writes: the model's markup, which the
# test checks the template's past call lacks.
PAST_CALL_OTHERWISE = {
    # vLLM's template tells the model to write functools[{...}] but writes a past call as the bare object
    "microsoft--Phi-4-mini-instruct": "functools[",
    # IBM's template writes an assistant turn's content only: a past call is not written at all
    "ibm-granite--granite-3.3-2b-instruct": "<|tool_call|>",
}
# Templates this runtime's sandbox (immutable, as transformers') will not render with tools: what it refuses.
WITH_TOOLS_REFUSED = {
    # SGLang's DeepSeek-V4 template builds its tool list with list.append
    "deepseek-ai--DeepSeek-V4-Flash": "'append' of 'list' object is unsafe",
}
# Families whose real template was not reachable (tests/runtime/model_fixtures/README.md): config.json's
# model_type / architecture is their evidence, tested below.
NO_TEMPLATE = {"ernie45", "step3", "functiongemma", "mimo"}
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}


def test_every_fixture_is_expected_and_every_format_is_covered() -> None:
    assert sorted(p.name for p in FIXTURES.iterdir() if p.is_dir()) == sorted(EXPECTED)
    fixtures = {fmt for fmt, _ in EXPECTED.values()}
    assert fixtures | NO_TEMPLATE == set(FORMATS) and not fixtures & NO_TEMPLATE
    assert {f.format for f in model_info.FAMILIES} == set(FORMATS)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_the_checkpoint_names_its_format_and_reasoning(name: str) -> None:
    inf = infer(FIXTURES / name)
    assert (inf.tool_format, inf.reasoning) == EXPECTED[name], inf
    assert inf.known and inf.format_reason.startswith("the chat template writes")


class _OneInstant(datetime):
    """The clock of templates that print the time (Hunyuan's, Apertus's, LFM2.5's): stopped, so the prompt
    without the call and the one with it agree up to the call."""

    @classmethod
    def now(cls, tz: Any = None) -> "_OneInstant":
        return cls(2026, 1, 5, 12, 0, 0)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_the_call_its_own_template_writes_is_read_back_by_the_inferred_parser(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chat_template, "datetime", _OneInstant)
    inf = infer(FIXTURES / name)
    templates, specials = model_templates(FIXTURES / name)
    specials = {"bos_token": "<s>", "eos_token": "</s>", **specials}  # the fixtures keep templates, not tokenizers
    source = templates["default"]
    user = {"role": "user", "content": "Weather in Paris?"}
    if name in WITH_TOOLS_REFUSED:
        with pytest.raises(PromptError, match=WITH_TOOLS_REFUSED[name]):
            render_template(source, specials, [user], [WEATHER])
        return
    before = render_template(source, specials, [user], [WEATHER], add_generation_prompt=False)
    written = _with_call(source, specials, user)
    assert written.startswith(before)
    if name in PAST_CALL_OTHERWISE:  # the template's past call is not the model's markup: nothing to read back
        assert PAST_CALL_OTHERWISE[name] not in written[len(before):]
        return
    turn = parse_text(inf.tool_format, written[len(before):], tools=[WEATHER], reasoning=inf.reasoning or None)
    assert [(c.name, json.loads(c.arguments)) for c in turn.calls] == [("get_weather", {"city": "Paris"})], \
        (written[len(before):], turn)


def test_the_bundled_model_is_hermes_without_reasoning() -> None:
    inf = infer(REPO / "models" / "tiny-agent")
    assert (inf.tool_format, inf.reasoning) == ("hermes", "")


@pytest.mark.parametrize(("model_type", "arch", "fmt"), [
    ("gpt_oss", "GptOssForCausalLM", "harmony"), ("glm4_moe", "Glm4MoeForCausalLM", "glm45"),
    ("kimi_k2", "DeepseekV3ForCausalLM", "kimi_k2"), ("llama4", "Llama4ForConditionalGeneration", "pythonic"),
    ("", "Qwen3ForCausalLM", "hermes"), ("llama", "LlamaForCausalLM", "llama3_json"),
    # the families without a reachable template (NO_TEMPLATE), LongCat (its published config.json names only its
    # architecture), and those whose type is evidence too
    ("longcat_flash", "LongcatFlashForCausalLM", "longcat"), ("ernie4_5_moe", "Ernie4_5_MoeForCausalLM", "ernie45"),
    ("jamba", "JambaForCausalLM", "jamba"), ("granite", "GraniteForCausalLM", "granite"),
    ("step3_vl", "Step3VLForConditionalGeneration", "step3"), ("deepseek_v4", "", "deepseek_v4"),
    ("granitemoe", "GraniteMoeForCausalLM", "granite"),
    ("", "Ernie4_5ForCausalLM", "ernie45"),
    ("granitemoehybrid", "GraniteMoeHybridForCausalLM", "hermes"),
    ("glm4_moe_lite", "Glm4MoeLiteForCausalLM", "glm45"), ("bailing_hybrid", "BailingMoeV3ForCausalLM", "glm45"),
    ("step3p5", "Step3p5ForCausalLM", "qwen3_coder"), ("step3p7", "Step3p7ForConditionalGeneration", "qwen3_coder"),
    ("deepseek_v41", "DeepseekV41ForCausalLM", "deepseek_v41"), ("mimo_v2", "MiMoV2ForCausalLM", "mimo"),
    ("mimo_v2_flash", "MiMoV2FlashForCausalLM", "mimo"),
    ("minimax_m3_vl", "MiniMaxM3SparseForConditionalGeneration", "minimax_m3"), ("", "MiniMaxM3SparseForCausalLM", "minimax_m3"),
    ("kimi_k3", "KimiK3ForConditionalGeneration", "kimi_k3"), ("", "KimiK3ForConditionalGeneration", "kimi_k3"),
    ("gemma4_text", "Gemma4ForCausalLM", "gemma4"), ("", "Gemma4ForConditionalGeneration", "gemma4"),
    ("gemma4_unified", "Gemma4UnifiedForConditionalGeneration", "gemma4"),
])
def test_without_a_template_config_json_names_the_family(tmp_path: Path, model_type: str, arch: str,
                                                         fmt: str) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type, "architectures": [arch]}))
    found, why, known = tool_format_of(Checkpoint.read(tmp_path))
    assert (found, known) == (fmt, True) and "config.json names" in why


@pytest.mark.parametrize(("model_type", "arch"), [("bailing_hybrid", "BailingMoeV2_5ForCausalLM"),
                                                   ("nemotron_h", "NemotronHForCausalLM")])
def test_a_model_type_several_formats_share_names_none(tmp_path: Path, model_type: str, arch: str) -> None:
    """Ling 2.5 shares Ling 3's model_type, Nemotron-H and Nano 2 share Nemotron 3's: only a template tells."""
    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type, "architectures": [arch]}))
    assert tool_format_of(Checkpoint.read(tmp_path))[2] is False


@pytest.mark.parametrize(("model_type", "fmt"), [("ernie4_5_moe", "ernie45"), ("qwen2", "hermes"), ("", "hermes")])
def test_hermes_markup_is_ernie45_only_where_config_json_says_ernie(tmp_path: Path, model_type: str,
                                                                   fmt: str) -> None:
    """ERNIE 4.5 writes hermes' <tool_call>: the template alone cannot tell them apart."""
    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type}))
    template = "<tool_call>{{ messages }}</tool_call>"
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
    found, why, known = tool_format_of(Checkpoint.read(tmp_path))
    assert (found, known) == (fmt, True) and why.startswith("the chat template writes '<tool_call>'")


@pytest.mark.parametrize(("tokens", "template", "fmt"), [
    # FunctionGemma's tokenizer: its call tokens at ids 46-52 (added, not special)
    (["<start_function_declaration>", "<end_function_declaration>", "<start_function_call>", "<end_function_call>",
      "<start_function_response>", "<end_function_response>", "<escape>"], "", "functiongemma"),
    ([], "{% for m in messages %}{{ m.content }}{% endfor %}{{ '<start_function_call>call:' }}", "functiongemma"),
    (["<unused40>", "<unused41>"], "{% for m in messages %}{{ m.content }}{% endfor %}", "hermes"),  # plain Gemma 3
])
def test_functiongemma_is_told_from_gemma3_by_its_call_token_never_by_model_type(
        tmp_path: Path, tokens: list[str], template: str, fmt: str) -> None:
    """FunctionGemma and Gemma 3 share ``gemma3_text``: a plain Gemma 3 stays unknown (hermes, warned)."""
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"]}))
    tok: dict[str, Any] = {"added_tokens_decoder": {str(46 + i): {"content": t, "special": False}
                                                    for i, t in enumerate(tokens)}}
    if template:
        tok["chat_template"] = template
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(tok))
    found, _, known = tool_format_of(Checkpoint.read(tmp_path))
    assert (found, known) == (fmt, fmt == "functiongemma")


def test_a_special_token_names_the_family_when_the_template_does_not(tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({
        "chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}",
        "added_tokens_decoder": {"7": {"content": "<|tool_calls_section_begin|>", "special": True},
                                 "8": {"content": "<think>", "special": True}}}))
    inf = infer(tmp_path)
    assert (inf.tool_format, inf.reasoning) == ("kimi_k2", "think")
    assert "special token" in inf.format_reason


def test_an_unknown_checkpoint_is_hermes_with_a_warning_naming_the_flag(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "brand_new"}))
    cfg, lines = settle(load_config(model=str(tmp_path), tool_format="auto", reasoning="auto", settle=False))
    assert (cfg.tool_format, cfg.reasoning) == ("hermes", "")
    assert lines[0].startswith("warning: ") and "--tool-format" in lines[0]


def test_an_explicit_flag_wins_and_auto_is_settled_with_its_reason() -> None:
    model = str(FIXTURES / "Qwen--Qwen3-0.6B")
    cfg, lines = settle(load_config(model=model, tool_format="qwen3_coder", reasoning="auto", settle=False))
    assert (cfg.tool_format, cfg.reasoning) == ("qwen3_coder", "think")
    assert lines == ["reasoning think: the chat template writes '<think>'"]
    cfg, lines = settle(load_config(model=model, settle=False))
    assert (cfg.tool_format, lines[0]) == ("hermes", "tool format hermes: the chat template writes '<tool_call>'")
    assert settle(cfg) == (cfg, [])


def test_load_config_settles_auto_for_a_local_directory() -> None:
    cfg = load_config(model=str(FIXTURES / "openai--gpt-oss-120b"))
    assert (cfg.tool_format, cfg.reasoning) == ("harmony", "")
    assert load_config(model=str(FIXTURES / "openai--gpt-oss-120b"), reasoning="think").reasoning == "think"


def _with_call(source: str, specials: dict[str, str], user: dict) -> str:
    """The conversation with one assistant call, in the first message shape the template writes a call
    for: templates differ on null vs empty content (R1 writes calls only with null content)."""
    out = ""
    for content in (None, ""):
        call = {"role": "assistant", "content": content,
                "tool_calls": [{"id": "a1b2c3d4e", "type": "function",
                                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]}
        try:
            out = render_template(source, specials, [user, call], [WEATHER], add_generation_prompt=False)
        except PromptError:  # most templates need a string content
            continue
        if out.count("Paris") > 1:  # the user's message names it once; the call is written too
            return out
    return out  # the template writes no call (PAST_CALL_OTHERWISE says which do not)


def test_minimax_m3s_marker_token_names_it_and_its_think_token_the_reasoning(tmp_path: Path) -> None:
    """MiniMax-M3's tag marker is an added token of its tokenizer, as ``<mm:think>`` is."""
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({
        "chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}",
        "added_tokens_decoder": {"7": {"content": "]<]minimax[>[", "special": False},
                                 "8": {"content": "<mm:think>", "special": False}}}))
    inf = infer(tmp_path)
    assert (inf.tool_format, inf.reasoning) == ("minimax_m3", "think")
