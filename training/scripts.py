"""Made-up proper names in many writing systems, so that copying a value never depends on its script.

``name(rng)`` draws a script by weight, then 1 to 3 syllables of it.  The tokenizer is byte-level,
so every script here is representable; what the model must learn is to copy whatever bytes the
user typed.  Latin names (plain and with diacritics) are the majority, as in real requests.
"""

from __future__ import annotations

import random
from typing import Callable

_LATIN = ("b c d f g h j k l m n p r s t v w z br ch dr gr kr pl sh st th tr".split(),
          "a e i o u ai ea ou".split(), ["", "", "n", "r", "l", "s", "m", "k"])
_LATIN_X = ("b c d f g h k l m n p r s t v z ç ñ ł ś ž č š ř ğ ş ð þ sz cz".split(),
            "a e i o u á é í ó ú à è ò ä ë ö ü ã õ å ø æ â ê ô ı ő ű".split(), ["", "", "n", "r", "l", "s", "ß", "ň"])
_CYRILLIC = ("б в г д ж з к л м н п р с т ф х ц ч ш".split(), "а е и о у я ю ы э".split(), ["", "", "н", "в", "к", "р"])
_GREEK = ("β γ δ ζ θ κ λ μ ν ξ π ρ σ τ φ χ".split(), "α ε η ι ο υ ω ά έ ί ό".split(), ["", "", "ν", "ρ"])
_ARMENIAN = ("բ գ դ զ թ կ հ մ ն պ ռ ս վ տ ր".split(), "ա ե ի ո".split(), ["", "ն", "ր"])
_GEORGIAN = ("ბ გ დ ვ ზ თ კ ლ მ ნ პ რ ს ტ ფ ქ შ ც".split(), "ა ე ი ო უ".split(), ["", "", "ნ", "ს"])
_DEVANAGARI = ("क ख ग च ज ट ड त द न प ब म य र ल व स ह".split(), ["", "ा", "ि", "ी", "ु", "े", "ो"], ["", "", "ं", "न्"])
_THAI = ("ก ข ค ง จ ช ด ต ท น บ ป พ ม ย ร ล ว ส ห".split(), ["", "า", "ิ", "ี", "ุ", "เ", "อ"], ["", "", "น", "ง"])
_ARABIC = "ا ب ت ج ح د ر ز س ش ص ط ع ف ق ك ل م ن ه و ي".split()
_HEBREW = "א ב ג ד ה ו ז ח ט י כ ל מ נ ס ע פ צ ק ר ש ת".split()
_HANZI = ("京 山 川 海 南 北 东 西 上 中 州 城 港 岛 湖 江 河 田 村 林 安 平 宁 福 广 天 长 新 金 华 明 阳 龙 凤 春 秋 花 石 松 "
          "云 星 月 水 泉 桥 门 台 庆 兴 富 贵 美 和 德 乐 永 昌 盛 泰 清 风 光 青 白 红 黄").split()
_KANA = ("ア イ ウ エ オ カ キ ク ケ コ サ シ ス セ ソ タ チ ツ テ ト ナ ニ ヌ ネ ノ ハ ヒ フ ヘ ホ マ ミ ム メ モ ヤ ユ ヨ "
         "ラ リ ル レ ロ ワ ン か き く こ さ し す た な に の は ま み や ゆ ら り る わ").split()


def _syllabic(parts: tuple[list[str], list[str], list[str]]) -> Callable[[random.Random, int], str]:
    onsets, vowels, codas = parts

    def make(rng: random.Random, n: int) -> str:
        word = "".join(rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas) for _ in range(n))
        return word[:1].upper() + word[1:]
    return make


def _letters(alphabet: list[str], per_syllable: int) -> Callable[[random.Random, int], str]:
    def make(rng: random.Random, n: int) -> str:
        return "".join(rng.choice(alphabet) for _ in range(n * per_syllable))
    return make


def _hangul(rng: random.Random, n: int) -> str:
    """Composed Hangul syllables (initial x medial x optional final)."""
    return "".join(chr(0xAC00 + (rng.randrange(19) * 21 + rng.randrange(21)) * 28 + rng.choice([0, 0, 4, 8, 16]))
                   for _ in range(n))


SCRIPTS: dict[str, tuple[float, Callable[[random.Random, int], str]]] = {
    "latin": (0.46, _syllabic(_LATIN)), "latin_x": (0.22, _syllabic(_LATIN_X)),
    "cyrillic": (0.06, _syllabic(_CYRILLIC)), "greek": (0.03, _syllabic(_GREEK)),
    "hanzi": (0.05, _letters(_HANZI, 1)), "kana": (0.03, _letters(_KANA, 2)), "hangul": (0.04, _hangul),
    "arabic": (0.03, _letters(_ARABIC, 2)), "hebrew": (0.02, _letters(_HEBREW, 2)),
    "devanagari": (0.02, _syllabic(_DEVANAGARI)), "thai": (0.02, _syllabic(_THAI)),
    "armenian": (0.01, _syllabic(_ARMENIAN)), "georgian": (0.01, _syllabic(_GEORGIAN)),
}


def name(rng: random.Random, script: str | None = None) -> str:
    """A made-up proper name of 1 to 3 syllables in ``script`` (drawn by weight when None)."""
    if script is None:
        script = rng.choices(list(SCRIPTS), [w for w, _ in SCRIPTS.values()])[0]
    n = rng.choices([1, 2, 3], [0.2, 0.6, 0.2])[0]
    return SCRIPTS[script][1](rng, max(n, 2) if script in ("hanzi", "hangul") else n)
