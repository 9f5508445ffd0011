"""A small byte-level BPE tokenizer where a value has the same tokens wherever it appears.

The pre-tokenizer isolates every letter run, every single digit, every whitespace character
and every punctuation character, so merges never cross a space or a quote: "Paris" is the
same ids after "in " in prose, after '"' in JSON and in the final answer.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>",
                  "<tool_response>", "</tool_response>"]
PAD, BOS_CHAT, EOS = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPLIT_PATTERN = r"\p{L}+|\p{N}|\s|[^\s\p{L}\p{N}]"


def new_tokenizer() -> Tokenizer:
    """An untrained tokenizer with the value-preserving pre-tokenizer and byte-level decoding."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    return tok


def train_tokenizer(texts: Iterable[str], vocab_size: int = 2048) -> Tokenizer:
    """Train BPE merges on ``texts``; the special tokens get ids 0..6."""
    tok = new_tokenizer()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    return tok
