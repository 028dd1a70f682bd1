"""The option a text's conclusion paraphrases, for the ``choice`` kind's last resort.

A model that answers in prose often names its choice only by the option's content, in its own words: "the
posterior tibial tendon is the most likely affected structure" for the option "El tendón del músculo tibial
posterior", "クループ症候群の治療としてアドレナリン吸入が適切である" for
「アドレナリン吸入を行います」. When the options are known and nothing else states a choice,
:func:`closest_option` compares the last sentences of the text's last paragraph with each option by the share of
the option's features (content words cut to six letters, accents dropped; pairs of Chinese, Japanese or Korean
characters) that the sentence holds.

It answers only when one sentence holds at least half of one option's features (at least two of them, unless the
option has one) and at most half as many of any other's, and it abstains when:

- two options have the same features ("True, False" and "False, True"): no sentence can tell them apart;
- the text boxes an answer: a boxed value that is no option means the text answered something else (the
  caller's check: it reads the boxes);
- the last paragraph says no option can be chosen ("none of the options", "cannot", "no se puede", "无法");
- the first sentence, from the end, that holds half of an option holds half of another too.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Mapping

SENTENCES_READ = 3
"""Sentences of the last paragraph read, from its end."""

_STOP = frozenset("""
the and for with that this from are was were which what when where than then into onto over under about also
only more most less such their there these those they them have has had been being will would could should does
done other each some many much very just like because while after before between both either neither option
options answer correct choice statement
los las del una uno unos unas para por con que como más pero sus sobre este esta estos estas entre sin desde
hasta cuando donde porque todo toda todos todas otro otra otros otras ser son está están hay opcion respuesta
""".split())
"""Words no option is told apart by (English and Spanish, the languages of the corpus's prose answers)."""

_WIDE = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\uf900-\ufaff]+")
_WORD = re.compile(r"[^\W_]+")
_PARAGRAPH = re.compile(r"\n[ \t]*\n")
_SENTENCE = re.compile(r"(?<=[.!?。！？])\s*|\n+")
_ABSTAINS = re.compile(
    r"\b(?:none|neither|cannot|can't|not (?:listed|enough|possible|sure)|enough information|insufficient"
    r"|no se puede|ninguna|ninguno)\b|无法|無法|不能确定|できない|わからない", re.IGNORECASE)


def features(text: str) -> frozenset[str]:
    """A text's features (its markup already read through): its content words of four letters or more (or with a
    digit), lower case, accents dropped, cut to six letters; and every pair of adjacent Chinese, Japanese or Korean
    characters."""
    out: set[str] = set()
    if text.isascii():  # no form to normalise, no wide run
        low = text.lower()
    else:
        low = unicodedata.normalize("NFKC", text).lower()
        for run in _WIDE.findall(low):
            out |= {run[i: i + 2] for i in range(len(run) - 1)} if len(run) > 1 else {run}
        low = _WIDE.sub(" ", low)
    for word in _WORD.findall(low):
        if not word.isascii():  # accents dropped
            word = "".join(c for c in unicodedata.normalize("NFKD", word) if not unicodedata.combining(c))
        if (len(word) >= 4 or any(c.isdigit() for c in word)) and word not in _STOP:
            out.add(word[:6])
    return frozenset(out)


def option_features(choices: Mapping[str, str], read: Callable[[str], str] = str) -> dict[str, frozenset[str]]:
    """Per letter, the features of its option's text (read through ``read``, the kind's markup reader); empty when
    two options have the same features, or fewer than two options have any."""
    found = {letter: features(read(text)) for letter, text in choices.items()}
    found = {letter: f for letter, f in found.items() if f}
    return found if len(found) >= 2 and len(set(found.values())) == len(found) else {}


def closest_option(options: Mapping[str, frozenset[str]], text: str) -> str | None:
    """The letter of the one option the end of ``text`` (its markup read through) paraphrases (see the module
    docstring), or ``None``.

    Examples:
        >>> options = option_features({"A": "Fimbriae", "B": "Pneumolysin", "C": "Polysaccharide capsule"})
        >>> closest_option(options, "So the polysaccharide capsule is the likely virulence factor.")
        'C'
        >>> closest_option(options, "Either the fimbriae or pneumolysin could do it.") is None
        True
    """
    if not options:
        return None
    last = _PARAGRAPH.split(text.strip())[-1]
    if _ABSTAINS.search(last):
        return None
    sentences = [s for s in _SENTENCE.split(last) if s and s.strip()]
    for sentence in reversed(sentences[-SENTENCES_READ:]):
        held = features(sentence)
        scores = sorted(((len(f & held) / len(f), len(f & held), letter) for letter, f in options.items()),
                        reverse=True)
        (best, hits, letter), (second, _, _) = scores[0], scores[1]
        if best >= 0.5 and (hits >= 2 or len(options[letter]) == 1) and second <= best / 2:
            return letter
        if second >= 0.5:
            return None  # the sentence names two options alike: no single one
    return None
