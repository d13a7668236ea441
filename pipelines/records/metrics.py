"""Pure retrieval and answer metrics: DDAI's NDCG, ANLS, exact match, token F1, VQAv2 accuracy.

No IO here; every function is deterministic and safe on empty input.
"""

from __future__ import annotations

import math
import re
import string
import unicodedata
from collections import Counter


def dedupe(items: list[str] | None) -> list[str]:
    """Distinct items in first-seen order."""
    return list(dict.fromkeys(items or []))


def ndcg(retrieved: list[str], golden: list[str]) -> float:
    """DDAI's NDCG: binary relevance over the distinct retrieved pages in first-seen order.

    DCG = Σ_i (2^rel_i − 1) / log2(i + 1) over retrieved positions i = 1…R; the ideal list has as
    many 1s as there are golden pages, padded with 0s to R and never truncated, so a single correct
    page out of two golden ones scores ``1 / (1 + 1/log2 3) ≈ 0.613``. 0 with no golden or no
    retrieved page.
    """
    gold = set(golden or [])
    ret = dedupe(retrieved)
    if not gold or not ret:
        return 0.0
    dcg = sum(1.0 / math.log2(i + 2) for i, page in enumerate(ret) if page in gold)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(len(gold)))
    return dcg / ideal if ideal > 0 else 0.0


def doc_of(page: str) -> str:
    """Document id of a page basename ``{doc}_{page}``."""
    return page.rsplit("_", 1)[0] if "_" in page else page


# ---------------------------------------------------------------- answer normalization

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.IGNORECASE)
_EDGE_PUNCT = "".join(sorted(_PUNCT - set("+-%")))
_NUMBER = re.compile(r"^[+-]?[\d,]*\.?\d+%?$")


def _canonical_number(tok: str) -> str:
    t = tok.replace(",", "")
    pct = t.endswith("%")
    t = t.rstrip("%")
    try:
        v = float(t)
    except ValueError:
        return tok
    s = f"{v:.10g}"
    return s + ("%" if pct else "")


def normalize_answer(s: str | None) -> str:
    """Lowercase, strip accents' compatibility forms, punctuation, articles and extra spaces;
    numbers are canonicalised (``1,000`` → ``1000``, ``3.50`` → ``3.5``)."""
    if not s:
        return ""
    s = unicodedata.normalize("NFKC", s).lower().strip()
    toks = []
    for tok in s.split():
        core = tok.strip(_EDGE_PUNCT)  # "13.2!" -> "13.2": keep the decimal point of a number
        if _NUMBER.match(core):
            toks.append(_canonical_number(core))
        else:
            toks.append("".join(ch for ch in tok if ch not in _PUNCT))
    s = " ".join(t for t in toks if t)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def exact_match(pred: str | None, answers: list[str]) -> float:
    p = normalize_answer(pred)
    return float(any(p == normalize_answer(a) for a in answers if a is not None))


def token_f1(pred: str | None, answers: list[str]) -> float:
    """Max over answers of SQuAD-style token F1 on normalized text."""
    ptoks = normalize_answer(pred).split()
    best = 0.0
    for a in answers:
        atoks = normalize_answer(a).split()
        if not ptoks or not atoks:
            best = max(best, float(ptoks == atoks))
            continue
        common = Counter(ptoks) & Counter(atoks)
        same = sum(common.values())
        if same == 0:
            continue
        prec, rec = same / len(ptoks), same / len(atoks)
        best = max(best, 2 * prec * rec / (prec + rec))
    return best


def levenshtein(a: str, b: str) -> int:
    if a == b:
        return 0
    if len(a) < len(b):
        a, b = b, a
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def anls(pred: str, answers: list[str], tau: float = 0.5) -> float:
    """Average Normalized Levenshtein Similarity for one prediction (Biten et al., 2019).

    For each answer: NL = lev(p, a) / max(|p|, |a|) on lowercased, whitespace-stripped text;
    score = 1 − NL if NL < tau else 0; the max over answers.
    """
    p = " ".join((pred or "").lower().split())
    best = 0.0
    for a in answers:
        g = " ".join((a or "").lower().split())
        if not p and not g:
            return 1.0
        nl = levenshtein(p, g) / max(len(p), len(g))
        best = max(best, 1.0 - nl if nl < tau else 0.0)
    return best


# ---------------------------------------------------------------- VQAv2 accuracy (official)
# The normalization of the official VQA evaluation script (GT-Vision-Lab/VQA, vqaEval.py):
# punctuation, number words, articles and contractions, applied in that order.

_VQA_CONTRACTIONS: dict[str, str] = {
    "aint": "ain't", "arent": "aren't", "cant": "can't", "couldve": "could've",
    "couldnt": "couldn't", "couldn'tve": "couldn't've", "couldnt've": "couldn't've",
    "didnt": "didn't", "doesnt": "doesn't", "dont": "don't", "hadnt": "hadn't",
    "hadnt've": "hadn't've", "hadn'tve": "hadn't've", "hasnt": "hasn't", "havent": "haven't",
    "hed": "he'd", "hed've": "he'd've", "he'dve": "he'd've", "hes": "he's", "howd": "how'd",
    "howll": "how'll", "hows": "how's", "Id've": "I'd've", "I'dve": "I'd've", "Im": "I'm",
    "Ive": "I've", "isnt": "isn't", "itd": "it'd", "itd've": "it'd've", "it'dve": "it'd've",
    "itll": "it'll", "let's": "let's", "maam": "ma'am", "mightnt": "mightn't",
    "mightnt've": "mightn't've", "mightn'tve": "mightn't've", "mightve": "might've",
    "mustnt": "mustn't", "mustve": "must've", "neednt": "needn't", "notve": "not've",
    "oclock": "o'clock", "oughtnt": "oughtn't", "ow's'at": "'ow's'at", "'ows'at": "'ow's'at",
    "'ow'sat": "'ow's'at", "shant": "shan't", "shed've": "she'd've", "she'dve": "she'd've",
    "she's": "she's", "shouldve": "should've", "shouldnt": "shouldn't",
    "shouldnt've": "shouldn't've", "shouldn'tve": "shouldn't've", "somebody'd": "somebodyd",
    "somebodyd've": "somebody'd've", "somebody'dve": "somebody'd've",
    "somebodyll": "somebody'll", "somebodys": "somebody's", "someoned": "someone'd",
    "someoned've": "someone'd've", "someone'dve": "someone'd've", "someonell": "someone'll",
    "someones": "someone's", "somethingd": "something'd", "somethingd've": "something'd've",
    "something'dve": "something'd've", "somethingll": "something'll", "thats": "that's",
    "thered": "there'd", "thered've": "there'd've", "there'dve": "there'd've",
    "therere": "there're", "theres": "there's", "theyd": "they'd", "theyd've": "they'd've",
    "they'dve": "they'd've", "theyll": "they'll", "theyre": "they're", "theyve": "they've",
    "twas": "'twas", "wasnt": "wasn't", "wed've": "we'd've", "we'dve": "we'd've",
    "weve": "we've", "werent": "weren't", "whatll": "what'll", "whatre": "what're",
    "whats": "what's", "whatve": "what've", "whens": "when's", "whered": "where'd",
    "wheres": "where's", "whereve": "where've", "whod": "who'd", "whod've": "who'd've",
    "who'dve": "who'd've", "wholl": "who'll", "whos": "who's", "whove": "who've",
    "whyll": "why'll", "whyre": "why're", "whys": "why's", "wont": "won't",
    "wouldve": "would've", "wouldnt": "wouldn't", "wouldnt've": "wouldn't've",
    "wouldn'tve": "wouldn't've", "yall": "y'all", "yall'll": "y'all'll", "y'allll": "y'all'll",
    "yall'd've": "y'all'd've", "y'alld've": "y'all'd've", "y'all'dve": "y'all'd've",
    "youd": "you'd", "youd've": "you'd've", "you'dve": "you'd've", "youll": "you'll",
    "youre": "you're", "youve": "you've",
}  # fmt: skip
_VQA_NUMBER_WORDS = {
    "none": "0", "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5",
    "six": "6", "seven": "7", "eight": "8", "nine": "9", "ten": "10",
}  # fmt: skip
_VQA_ARTICLES = frozenset({"a", "an", "the"})
_VQA_PUNCT = (";", "/", "[", "]", '"', "{", "}", "(", ")", "=", "+", "\\", "_", "-", ">", "<", "@", "`", ",", "?", "!")  # fmt: skip
_VQA_COMMA_BETWEEN_DIGITS = re.compile(r"(\d)(,)(\d)")
# As written in the official script: the leading "(?!<=\d)" is a no-op (a look-ahead for the
# literal "<="), so every period not followed by a digit goes ("3.5" keeps its point).
_VQA_PERIOD = re.compile(r"(?!<=\d)(\.)(?!\d)")
# The official script passes ``re.UNICODE`` (= 32) where ``re.sub`` expects ``count``.
_VQA_PERIOD_COUNT = 32


def vqa_process_punctuation(text: str) -> str:
    """The official punctuation step.

    A mark next to a space (or any mark, once the text has a digit-comma-digit run) is deleted;
    otherwise it becomes a space (``t-shirt`` → ``t shirt``, ``1,000`` → ``1000``). Then periods
    not followed by a digit are deleted. Case is left alone.
    """
    out = text
    strip_all = _VQA_COMMA_BETWEEN_DIGITS.search(text) is not None
    for p in _VQA_PUNCT:
        if strip_all or f"{p} " in text or f" {p}" in text:
            out = out.replace(p, "")
        else:
            out = out.replace(p, " ")
    return _VQA_PERIOD.sub("", out, count=_VQA_PERIOD_COUNT)


def vqa_process_digit_article(text: str) -> str:
    """The official word step: lowercase, number words → digits, drop articles, restore
    contractions (``dont`` → ``don't``), single spaces."""
    words = [_VQA_NUMBER_WORDS.get(w, w) for w in text.lower().split()]
    words = [w for w in words if w not in _VQA_ARTICLES]
    return " ".join(_VQA_CONTRACTIONS.get(w, w) for w in words)


def vqa_normalize(text: str | None) -> str:
    """An answer as the official script compares it: whitespace, punctuation, then words."""
    s = (text or "").replace("\n", " ").replace("\t", " ").strip()
    return vqa_process_digit_article(vqa_process_punctuation(s))


def vqa_accuracy(pred: str, answers: list[str], *, normalize_answers: bool = False) -> float:
    """Official VQAv2 accuracy of one prediction against the human answers (10 in VQAv2).

    For each human answer left out in turn, ``min(1, #matches among the others / 3)``; the mean
    over the leave-one-out subsets. With 10 answers, 0/1/2/3/4+ matches score 0/0.3/0.6/0.9/1.0.

    By default this is the official script (GT-Vision-Lab/VQA ``vqaEval.py``) to the letter, so
    numbers compare with published ones: the prediction gets whitespace, punctuation and
    digit/article processing (``vqa_normalize``); the human answers get only the punctuation step,
    and only when they are not all identical. So ``"2"`` against 2×"two" + 2×"2" + 6×"three" is
    0.6: "two" is not a match. ``normalize_answers=True`` is a symmetric variant (not comparable
    with papers): the answers get ``vqa_normalize`` too, so hand-written answers ("Two", "a dog")
    count as their normalized form. 0 with no answers.
    """
    if not answers:
        return 0.0
    res = vqa_normalize(pred)
    if normalize_answers:
        gts = [vqa_normalize(a) for a in answers]
    elif len(set(answers)) > 1:
        gts = [vqa_process_punctuation(a or "") for a in answers]
    else:
        gts = [a or "" for a in answers]
    matches = sum(a == res for a in gts)
    # leaving out a matching answer leaves matches - 1 among the others, else all matches
    per_subset = [min(1.0, (matches - (a == res)) / 3.0) for a in gts]
    return sum(per_subset) / len(per_subset)


def vqa_accuracy_symmetric(pred: str, answers: list[str]) -> float:
    """``vqa_accuracy`` with the human answers normalized like the prediction (not official)."""
    return vqa_accuracy(pred, answers, normalize_answers=True)
