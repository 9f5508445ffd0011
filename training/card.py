"""The model card (README.md) of the shipped tiny-agent directory, filled in from the eval curve."""

from __future__ import annotations

import json
import math
from pathlib import Path

from safetensors import safe_open

from training.evaluate import METRICS, TARGETS

_CARD = """\
# tiny-agent — a 2M-parameter tool-calling demonstration model

**This is a demonstration model, not a general assistant.** It was trained from scratch in
about {minutes:.0f} minutes with one thread on a shared 2-core CPU machine, on generated dialogues only. It knows five tools
(`get_weather`, `book_restaurant`, `get_time`, `calculator`, `search`; schemas in
`training/tools_spec.py`), the Qwen2.5/Hermes tool-calling format, and a small set of phrasings.
It has no world knowledge and will produce nonsense outside that domain. It exists so that
turnstream can show a real model calling tools without downloading one.

## Model
- Architecture: `Qwen2ForCausalLM` (model_type `qwen2`), {params:,} parameters, hidden {hidden},
  {layers} layers, {heads} query / {kv} KV heads (head dim {hd}), FFN {ffn}, tied embeddings,
  RoPE theta {theta:.0f}, vocab {vocab}. Weights fp32 ({size_mb:.1f} MB `model.safetensors`).
- Tokenizer (`tokenizer.json`; `PreTrainedTokenizerFast.from_pretrained` loads it as is, and
  `AutoTokenizer` picks Qwen2's class, which yields the same ids — a test checks both): byte-level BPE whose
  pre-tokenizer isolates every letter run, every digit, every whitespace character and every
  punctuation character. Merges never cross a space or a quote, so a value such as `Paris`,
  `Europe/Oslo` or `19:00` is the same token ids in the user message, in the JSON arguments and
  in the answer. Special tokens: `<|endoftext|>` (0, pad), `<|im_start|>` (1), `<|im_end|>` (2, eos),
  `<tool_call>`, `</tool_call>`, `<tool_response>`, `</tool_response>`.
- Chat template (`tokenizer_config.json`): Qwen2.5 layout with a compact tool list
  (`get_weather(city, date?)`, ...) in the system prompt; assistant tool calls are rendered as
  `<tool_call>\\n{{"name": ..., "arguments": ...}}\\n</tool_call>`; `tool` messages become a user turn
  of `<tool_response>` blocks. Works with `apply_chat_template(messages, tools=..., add_generation_prompt=True)`.

## Training
- Data (`training/datagen.py`): endless generated multi-turn dialogues (1–3 exchanges): single
  calls (5 tools), two calls in one turn, follow-ups ("And in Oslo?"), small talk that needs no
  tool, and final answers that copy numbers, names and places from the tool results. Values come
  from generated pools (made-up city and restaurant names from a syllable inventory, a few real
  ones such as Paris, dates, times, numbers, expressions, queries); 1 in 5 values (by a stable
  hash) is held out for evaluation only. Phrasings are wrapper × template combinations, a quarter
  of which are held out.
- Loss on assistant tokens only. AdamW (betas 0.9/0.95, weight decay 0.1), peak lr 3e-3,
  200 warm-up steps, cosine to 10 %, ~4096 padded tokens per step in length buckets, gradient
  clipping 1.0, bf16 autocast, `torch.compile`.
- Hardware: {hardware}; `torch.set_num_threads(1)`. The shipped checkpoint is step {step},
  after {minutes:.0f} minutes of training.
- Reproduce from a fresh clone (about 1.5–2 hours on one free core):
  `python -m training.train --out .train/run1 --steps 12000` (resumable: rerun the same command;
  logs to stdout, snapshots to `.train/run1/snapshots/`), and alongside it
  `python -m training.watch --run .train/run1 --final-step 12000 --scale 0.5`, which draws the
  learning curve below while the run trains, then picks among the last four snapshots on a separate
  selection set and copies the pick here with this card (`make train` runs both). The shipped
  model is exactly that: one uninterrupted run of these two commands in a fresh clone of the
  repository, with the watcher's pick. An earlier run of the same recipe (resumed three times with
  re-planned step budgets) reached 99.5 / 99.6 / 93.3 / 85.0 / 98.8 % on the metrics below: the
  recipe reproduces, within a few prompts.

## Evaluation (held-out values and phrasings, greedy decoding)
`turnstream eval tiny` (or `python -m training.evaluate`), {n} prompts:

| metric | shipped model | target |
|---|---|---|
{metrics_table}

Per task: {per_task}

The shipped checkpoint was chosen among the last four snapshots on a separate selection set
(`build_items(seed=1)`), then measured on the evaluation set above (seed 0). turnstream's native
engine (`--backend native`), transformers (`--backend transformers`) and the plain-torch KV-cache
decoder (`--backend torch`) give identical greedy outputs (`tests/training/test_tiny_native_parity.py`).

## Usage
```python
from transformers import AutoTokenizer, Qwen2ForCausalLM
from training.tools_spec import TOOLS
tok = AutoTokenizer.from_pretrained("models/tiny-agent")
model = Qwen2ForCausalLM.from_pretrained("models/tiny-agent")
msgs = [{{"role": "user", "content": "What's the weather in Paris and book a table for 2 at Chez Nous at 19:00?"}}]
ids = tok.apply_chat_template(msgs, tools=TOOLS, add_generation_prompt=True, return_tensors="pt", return_dict=True)
out = model.generate(**ids, max_new_tokens=120, do_sample=False)
print(tok.decode(out[0, ids["input_ids"].shape[1]:]))
```
`python -m training.demo` runs the full round trip with stub tools:
```
assistant> <tool_call>
{{"name": "get_weather", "arguments": {{"city": "Paris"}}}}
</tool_call>
<tool_call>
{{"name": "book_restaurant", "arguments": {{"restaurant": "Chez Nous", "party_size": 2, "time": "19:00"}}}}
</tool_call><|im_end|>
tool> {{"city": "Paris", "date": "2026-11-30", "temperature": 21, "condition": "sunny"}}
tool> {{"status": "confirmed", "booking_id": "R40213", "restaurant": "Chez Nous", "party_size": 2, "time": "19:00"}}
assistant> It's 21°C and sunny in Paris. Your table for 2 at Chez Nous is booked for 19:00. Booking ID: R40213.<|im_end|>
```

## Learning curve
Evaluated by `training/watch.py` while training ran, on half of the evaluation set (n = prompts
per evaluation); reported only, never used to pick the shipped checkpoint.

| step | minutes | n | {curve_head} |
|---|---|---|{curve_sep}
{curve_rows}

## Limitations
- Only the five tools above, with these argument names; other tools in the prompt are ignored.
- Only phrasings close to the training templates; free-form questions get canned replies.
- Values are copied, not understood: "Tokyo" is not turned into `Asia/Tokyo`; the user must
  give the timezone name, ISO dates (`2027-05-01`) and `HH:MM` times.
- Trained for minutes on a CPU; it is a demo of the serving runtime, never a product model.
"""


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x * 100:.1f} %"


def build_card(model_dir: Path, row: dict, curve: list[dict], hardware: str = "2-core AMD EPYC VM (x86_64, no GPU)") -> str:
    """README.md text for ``model_dir`` shipping the checkpoint described by ``row``."""
    c = json.loads((model_dir / "config.json").read_text())
    size = (model_dir / "model.safetensors").stat().st_size
    with safe_open(str(model_dir / "model.safetensors"), "pt") as f:
        params = sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())
    metrics_table = "\n".join(f"| {m} | {_pct(row.get(m))} | ≥ {TARGETS[m] * 100:.0f} % |" for m in METRICS)
    per_task = ", ".join(f"{k} {v * 100:.0f} %" for k, v in row.items()
                         if "/" in k and "+" not in k and not k.startswith("right_tool")) or "–"
    rows = "\n".join(f"| {r['step']} | {r['elapsed_s'] / 60:.0f} | {r.get('n', '?')} | " + " | ".join(_pct(r.get(m)) for m in METRICS) + " |"
                     for r in curve)
    return _CARD.format(
        minutes=row["elapsed_s"] / 60, params=params, hidden=c["hidden_size"], layers=c["num_hidden_layers"],
        heads=c["num_attention_heads"], kv=c["num_key_value_heads"], hd=c["head_dim"], ffn=c["intermediate_size"],
        theta=c["rope_theta"], vocab=c["vocab_size"], size_mb=size / 1e6, hardware=hardware, step=row["step"],
        n=row.get("n", "?"), metrics_table=metrics_table, per_task=per_task, curve_head=" | ".join(METRICS),
        curve_sep="---|" * len(METRICS), curve_rows=rows)
