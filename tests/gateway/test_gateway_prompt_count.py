"""The one prompt counter of the gateway (gateway.context): the context check, Messages' count_tokens
and Responses' input_tokens all count with it."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.context import BOUND_SLACK, ContextCheck, tokenizer_unavailable
from runtime.chat_template import PromptError

MODEL = Path(__file__).resolve().parents[2] / "models" / "tiny-agent"
USER = [{"role": "user", "content": "What's the weather in Paris?"}]


async def test_counts_with_the_models_template_or_says_it_cannot(r, tmp_path: Path) -> None:
    check = ContextCheck(r, str(MODEL))
    bare = await check.count(USER, [])
    tool = {"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object",
                                                                                              "properties": {}}}}
    assert bare is not None and bare > 5 and await check.count(USER, [tool]) > bare
    with pytest.raises(PromptError):  # a conversation the template refuses
        await check.count([{"role": "tool", "content": 5}], [])
    assert await ContextCheck(r, str(tmp_path)).count(USER, []) is None  # no tokenizer here
    err = tokenizer_unavailable("count_tokens")
    assert err.status == 501 and err.code == "tokenizer_unavailable"


def test_a_prompt_that_fits_by_its_length_alone_is_not_tokenised(monkeypatch) -> None:
    """The context check's bound (``enough``): an ASCII prompt whose length shows that it fits is not
    tokenised, and the bound it gets is at least the count; any other is counted exactly."""
    from gateway.context import BOUND_SLACK, PromptMeter
    from runtime.chat_template import ChatTokenizer

    meter = PromptMeter(str(MODEL))
    exact = meter.count(USER, [])
    text = meter._load().render(USER, None, add_generation_prompt=True)
    encoded: list[str] = []
    real = ChatTokenizer.encode
    monkeypatch.setattr(ChatTokenizer, "encode", lambda self, t: encoded.append(t) or real(self, t))
    bound = meter.count(USER, [], enough=10_000)
    assert bound == len(text) + BOUND_SLACK >= exact and encoded == []
    assert meter.count(USER, [], enough=len(text)) == exact and len(encoded) == 1  # the bound would not fit
    accented = [{"role": "user", "content": "Qu'il fait beau à Paris"}]
    assert meter.count(accented, [], enough=10_000) == meter.count(accented, []) and len(encoded) == 3


def _families() -> dict[str, object]:
    """Tokenizers of the families a served model may use, trained here from nothing on a little English."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    from training.tokenizer import train_tokenizer

    corpus = ["What's the weather in Paris today? It is 21 degrees.", "def f(x):\n    return x * 2  # twice",
              "<|im_start|>user\nBook a table for 2 at 19:00<|im_end|>", "{\"city\": \"Oslo\", \"days\": [1, 2, 3]}"] * 20
    wordpiece = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    wordpiece.normalizer = normalizers.BertNormalizer(lowercase=True)
    wordpiece.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    wordpiece.train_from_iterator(corpus, trainers.WordPieceTrainer(vocab_size=300, special_tokens=["[UNK]"],
                                                                    show_progress=False))
    unigram = Tokenizer(models.Unigram())  # SentencePiece's: a leading "▁" for each word, the text's first included
    unigram.normalizer = normalizers.NFKC()
    unigram.pre_tokenizer = pre_tokenizers.Metaspace()
    unigram.decoder = decoders.Metaspace()
    unigram.train_from_iterator(corpus, trainers.UnigramTrainer(vocab_size=200, unk_token="<unk>",
                                                                special_tokens=["<unk>"], show_progress=False))
    llama2 = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))  # Llama 2's: a "▁" before every piece
    llama2.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    llama2.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    llama2.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"],
                                                           initial_alphabet=["▁"], show_progress=False))
    return {"byte-level BPE": train_tokenizer(corpus, vocab_size=400), "WordPiece": wordpiece, "Unigram": unigram,
            "Llama 2-like": llama2}


def test_an_ascii_text_is_at_most_a_token_per_character_and_the_slack() -> None:
    """The bound's premise, on every tokenizer family, over random ASCII text (control characters,
    runs of spaces and digits, words it never saw)."""
    import random

    from gateway.context import BOUND_SLACK, bound_holds

    rng = random.Random(7)
    alphabet = [chr(i) for i in range(128)]
    texts = ["", " ", "  leading", "\n\n\t", "9" * 40, "Paris " * 30, "<|im_start|>", "</s>x" * 40, "<s></s>" * 20]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 200))) for _ in range(300)]
    for family, tok in _families().items():
        assert bound_holds(tok), family
        for text in texts:
            n = len(tok.encode(text, add_special_tokens=False).ids)
            assert n <= len(text) + BOUND_SLACK, (family, text, n)


def test_the_bound_is_not_taken_for_a_tokenizer_it_may_not_hold_for() -> None:
    """A one-character added token after which each piece gets a prefix, a normalizer that lengthens
    ASCII, a precompiled character map: the prompt is counted."""
    from tokenizers import AddedToken, Tokenizer, models, normalizers

    from gateway.context import bound_holds

    def tok(normalizer: object = None, added: str | None = None) -> Tokenizer:
        t = Tokenizer(models.BPE(unk_token="<unk>"))
        t.add_special_tokens(["<unk>"] + ([AddedToken(added, special=True)] if added else []))
        t.normalizer = normalizer
        return t

    assert bound_holds(tok()) and bound_holds(tok(normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])))
    assert bound_holds(tok(normalizers.Replace(" ", "▁")))  # one for one
    assert not bound_holds(tok(added="\n"))
    assert not bound_holds(tok(normalizers.Replace("a", "aaa")))
    assert not bound_holds(tok(normalizers.Sequence([normalizers.NFC(), normalizers.Replace("a", "ab")])))


    class Precompiled:  # a SentencePiece character map, as its tokenizer.json spells it
        def get_added_tokens_decoder(self) -> dict:
            return {}

        def to_str(self) -> str:
            return '{"normalizer": {"type": "Precompiled", "precompiled_charsmap": "AAAA"}}'

    assert not bound_holds(Precompiled())


async def test_the_context_check_answers_the_same_with_the_bound() -> None:
    """At the bound's edge, for a max_tokens sent and one not sent: the same answer as the exact count,
    with no tokenising where the bound fits."""
    from types import SimpleNamespace

    from runtime.chat_template import ChatTokenizer

    check = ContextCheck(None, str(MODEL))  # type: ignore[arg-type]
    text = check.meter._load().render(USER, None, add_generation_prompt=True)
    exact = check.meter.count(USER, [])
    calls: list[str] = []
    real = ChatTokenizer.encode
    ChatTokenizer.encode = lambda self, t: calls.append(t) or real(self, t)  # type: ignore[method-assign]
    try:
        for limit in (len(text) + BOUND_SLACK + 100, len(text) + BOUND_SLACK + 99):  # fits by the bound, or not
            async def get() -> int:
                return limit

            check.limits = SimpleNamespace(get=get)
            for sent in (True, False):
                before = len(calls)
                assert await check.fits(USER, [], max_tokens=100, sent=sent) == min(100, limit - exact)
                assert len(calls) - before == (0 if limit == len(text) + BOUND_SLACK + 100 else 1)
    finally:
        ChatTokenizer.encode = real  # type: ignore[method-assign]
