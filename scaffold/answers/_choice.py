r"""Multiple-choice answers: the letter a text chooses, from every common way of stating it.

A text states a choice in three ways, strongest first:

- **a boxed choice**: ``\boxed{B}``, ``\boxed{(A) 54}``, ``\boxed{\text{(B) } \sim 0.36}``, or, when the row's
  options are known, a boxed option text (``\boxed{0.36}``);
- **a cue**: "the answer is (B)", "Answer: C", "the correct option is **(A)**", "I'll go with D", "Option C is
  correct", "Conclusion: Option B ...", "答案是 B", "故选C", "정답: C", "Resposta: D", "A resposta correta é a B", "La
  respuesta correcta es (B)", "Die richtige Antwort ist C", "Правильный ответ: B", "Đáp án: C"; when the options are
  known, a cue followed by an option's text ("the answer is 54") counts too;
- **a line that is only a choice**: ``**(C)**`` alone on a line; or a last line that gives an option, letter and
  text ("C: The observed number of deaths"), as the whole text or after a line introducing it with a colon;
- **a last sentence naming one option**, when nothing above states a choice: "So the right pick here is B.",
  "Respuesta: B", "Among the options, C is the only one that fits." (a sentence that denies, names two letters,
  weighs options one per line or is cut off mid-sentence states nothing; "A" as an article and "I" as a pronoun
  are no letters); or a last line that opens with a Chinese conclusion and names one option, even to deny it, as a
  question asking for the wrong statement is answered: "综上所述，选项A是不正确的，因为...".

Markdown and LaTeX wrappers (``**``, ``$``, ``\text{}``, ``\textbf{}``, ``\mathrm{}``) are read through. The
choice is the last boxed choice or cue in the text (a text that reconsiders ends with its final choice), else its
last choice-only line; a boxed value that is no choice (an intermediate result) is passed over. "The answer is
not (A)" states nothing.

A reasoning model's answer after its reasoning (after ``</think>``, Gemma's ``<channel|>``, gpt-oss's final
channel) is its final one, whatever the reasoning stated. A ranked answer ("First Choice: B / Second Choice: D")
chooses its first. Circled numbers (``③``), Korean option numbers ("3번") and Arabic option letters (أ ب ج د ه)
are their options' letters, and with ``numbered=True`` (the prompt numbered its options 1, 2, ...) so is a number
stated as the answer ("Answer: 3", ``"answer": 3``, ``\boxed{3}``, "2: Thymoma").

A final statement that names no single option wins over earlier choices: "Answer: B and D", "the answer is none
of the above", "【答案】: 题目可能有误" read as ``None``. A cue inside an echoed instruction ("reply as Answer: X,
e.g. Answer: A") is no choice, closing courtesies ("I hope this helps!") are passed over, and a text that lists
its own options ("(A) red / (B) blue / ... The answer is blue.") is read against them.
"""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from scaffold._answers import as_number
from scaffold._errors import AnswerKindError
from scaffold.answers._kind import AnswerKind, register_kind
from scaffold.answers._option_text import closest_option, option_features

_CAPITALS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
LETTERS = "ABCDEFGHIJ"
"""The letters a choice may take when the options are not given (up to ten options, as MMLU-Pro has)."""

WINDOWS = (2000,)
"""Characters at a text's end searched first, in turn: a final answer is there, and a long text is read in full
only when its tail states none. (A first window of 400 characters read the whole corpus of
``tests/data/choice_phrasings_*`` the same way and took longer: most texts are read in one pass of 2,000.)"""

_WRAPPERS = re.compile(r"\\(?:text|textbf|textit|texttt|mathrm|mathbf|mathit|mathsf|operatorname|emph|underline)"
                       r"\s*\{([^{}]*)\}")
_BARE_WRAPPER = re.compile(r"\\(?:text|textbf|mathrm|mathbf)\s+(?=[A-Za-z])")
_MARKS = re.compile(r"\*\*|__|\\\(|\\\)|\\\[|\\\]|\$|`|\\displaystyle|\\left|\\right|\\quad|\\qquad|\\;|\\,|\\!")
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_LETTER = r"[\(\[\{\"'“‘<]?\s*([A-Ja-j])\s*[\)\]\}\"'”’>]?"
_AFTER = r"(?=$|[\s.,;:!?)\]}'\"”’。，；：！？）<\u3000-\u9fff\uac00-\ud7a3]|\s*[-–—]|\d+\s*$)"
_NOT_ARTICLE = re.compile(r"[Aa][ \t]+(?!is\b|are\b|was\b|and\b|or\b|because\b|since\b|as\b|with\b|for\b)[a-z]"
                          r"|I\s+(?:think|believe|would|will|am|guess|feel|choose|pick|select|go|can|must|should|"
                          r"need|have|had|do|did|'m|'d|'ll)\b")
_CUE_BRANCHES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (r"\b(?:answer|ans\b)(?:\s+choice|_?(?:choice|letter|option|key))?(?:\s+to\s+(?:this|the)\s+question)?\s*"
     r"(?:is|would\s+be|should\s+be|will\s+be|must\s+be|=|:|：|-|–|—)?", ("ans",)),
    (r"\b(?:correct|right|best|final|only\s+correct)\s+(?:option|choice|letter|response|selection)\s*"
     r"(?:(?:here\s+)?is|would\s+be|should\s+be|=|:|：)?", ("correct", "right", "best", "final", "only")),
    (r"\b(?:correct|incorrect|best|closest|right|only|most\s+(?:\w+\s+){0,2}?)\s*"
     r"(?:answer|option|choice|statement|response|match)(?:\s+[\w,']+){0,8}?\s+(?:is|would\s+be)\s*:?",
     ("correct", "incorrect", "best", "closest", "right", "only", "most")),
    (r"\b(?:mak(?:e|es|ing)|leav(?:e|es|ing))\s+(?=(?:(?:option|choice)\s+)?[\(\[]?[A-J][\)\]]?\s+(?:as\s+)?(?:the\s+)?"
     r"(?:correct|right|best|only\s+correct|most\s+[a-z]+)\s+(?:answer|option|choice)\b)", ("mak", "leav")),
    (r"\b(?:option|choice)\s+(?:is|would\s+be)", ("option", "choice")),
    (r"(?<=\bis\s)(?:option|choice)\s+(?=[\(\[]?[A-J][\)\]]?(?:$|[\s.,:;]))", ("option", "choice")),
    (r"=\s*(?=(?:option|choice)\s)", ("=",)),
    (r"\bwhich\s+is\s+(?=(?:option|choice)\s)", ("which",)),
    (r"\bresponse[\"'”]?\s*[:：]", ("resp",)),
    (r"\bconclus(?:ion|ión|ão)\s*[:：]", ("conclus",)),
    (r"\b(?:resposta|respuesta|réponse|antwort)(?:\s+(?:correta|correcta|incorreta|incorrecta|certa|final|finale|correcte"
     r"|incorrecte|richtige|falsche))?\s*(?:é|es|est|ist|:|：|-|–)?(?:\s*(?:a|o|la|el)\s+(?=[\(\[]?[A-J](?!\w)))?",
     ("resp", "réponse", "antwort")),
    (r"\b(?:правильный\s+)?ответ\s*(?:[:：\-–—]|это)?", ("ответ",)),
    (r"\b(?:cevap|yanıt|seçenek)(?:ım)?\s*[:：]", ("cevap", "yanıt", "seçenek")),
    (r"उत्तर\s*(?:विकल्प\s*)?(?:है\s*)?[:：]?", ("उत्तर",)),
    (r"\bjawa[bp]an(?:\s+(?:akhir|yang\s+(?:benar|betul|tepat)|benar|betul))?\s*(?:adalah|ialah|:|：)?", ("jawa",)),
    (r"\b(?:correct|final)_(?:answer|option|choice)(?:_(?:key|letter|choice|option|id))?", ("correct", "final")),
    (r"\bđáp\s+án(?:\s+đúng)?(?:\s+là)?\s*[:：]?", ("đáp",)),
    (r"\bit(?:'s|\s+is)(?=\s*[\(\[][A-Ja-j][\)\]])", ("it",)),
    (r"\b(?:i|we)\s*(?:would\s+|will\s+|'ll\s+|'d\s+|shall\s+|should\s+|must\s+|can\s+)?"
     r"(?:choose|chose|pick|select|go\s+with|opt\s+for)", ("i ", "i'", "we ", "we'")),
    (r"\b(?:therefore|thus|hence|so),?\s+(?:the\s+answer\s+is\s+)?"
     r"(?=(?:(?:option|choice)\s*)?[\(\[]?[A-J][\)\]]?\s*(?:$|[.\n]))", ("therefore", "thus", "hence", "so")),
    (r"[\[【]?(?:正确|最终)?答案[\]】]?\s*(?:是|为|應為|应为|应该是|:|：)?\s*(?:选(?:择)?)?", ("答案",)),
    (r"(?:正确|对应|對應)选项\s*(?:是|为|:|：)?|选项\s*(?:是|为)", ("选",)),
    (r"(?:(?<=[故应應，,。：:\s])|(?<=所以|因此|本题|此题)|\A)选(?:择)?(?!项|出)", ("选",)),
    (r"(?<=[的项])是(?=\s*\[\s*[A-J]\s*\]|\s*[A-J](?:[。.，,；;\s]|$))", ("是",)),
    (r"(?:我的)?回答\s*(?:是|为|:|：)", ("回答",)),
    (r"(?:答え|正解|(?:正しい|適切な)(?:選択肢|答え|もの))\s*(?:は|:|：)", ("答え", "正解", "正しい", "適切")),
    (r"정답\s*(?:은|는|:|：)?", ("정답",)),
    (r"<answer>", ("<answer",)),
    (r"\(answer\)", ("(answer",)),
    (r"\((?:X|x)\)(?=[ \t]*[\(\[]?[A-J](?:$|[\s).:,]))", ("(x)",)),
)
"""The ways a cue opens, each with the cue words (:data:`_CUE_WORDS`) it can start with."""
_CUE_END = (r"[\"'”’>)\]】]?\s*[:：=]?\s*(?:is\s+)?(?:(?:option|choice|letter|sentence|statement|number)\s*[:：]?"
            r"\s*)?")
"""What every cue may end with: a closing quote or bracket, a colon, "is", "option"."""
_CUE = re.compile("(?:" + "|".join(branch for branch, _ in _CUE_BRANCHES) + ")" + _CUE_END, re.IGNORECASE)
_FIRST = re.compile(
    r"([A-J])\s*[\)\]]?,?\s+(?:which\s+)?(?:is|would\s+be|seems|appears|remains)\s+(?:to\s+be\s+)?(?:the\s+)?"
    r"(?:(?:most\s+)?(?:correct|right|best|true|accurate|answer)\b(?!\s+only\b|\s+if\b)"
    r"|most\s+(?!tempting|obvious|common|popular|intuitive|attractive|naive|frequent)[a-z]+\s+(?:choice|answer|option)\b"
    r"|only\s+(?:(?:correct|right|valid|possible|logical|true|reasonable|plausible)\s+)?(?:choice|answer)\b)",
)
"""A letter that says it is the answer: "(D) is the correct answer", "Option C is correct", "A remains the most
accurate choice", "option E is the most plausible choice", "option A is the only choice that can be true" (the
letter must not end a word: checked where it matches, which lets the regex scan for its first character fast)."""
_NAMED_RIGHT_TAIL = (r"\s+[^.\n]{1,60}?\s+(?:is|would\s+be)\s+(?:the\s+)?(?:most\s+)?"
                     r"(?:correct|right|best|true|accurate)\s+(?:answer|option|choice)")
"""What follows an option's "C)" when it is named with its text and said to be right."""
_NAMED_RIGHT = re.compile(r"\)(?<=([A-J])\))" + _NAMED_RIGHT_TAIL)
"""An option named with its text and said to be right ("option C) 45° is the correct answer"; its "(" before it, if
any, belongs to the statement). It matches from the bracket, its letter looked behind: the regex scans for a ")"
fast instead of trying every capital."""
_NAMED_AFTER_IS = re.compile(r"(?:is|be)\s+(?:option\s+)?\(?([A-J])\)\s+(?=[A-Z])")
"""An option stated with its text: "... is B) Production of ..." (at a word's start: checked where it matches, which
lets the regex scan for its first characters fast)."""
_NAMED_RIGHT_HINT = re.compile(r"\)(?<=[A-J]\))\s+[A-Z]")
"""What :data:`_NAMED_AFTER_IS` needs, "C) A": a letter's bracket, then a capital (:data:`_NAMED_RIGHT` needs a
word of :data:`_RIGHT_WORDS`). From the bracket, as :data:`_NAMED_RIGHT`."""
_AFTER_CUE = re.compile(_LETTER + _AFTER)
_MORE_LETTERS = re.compile(r"(?:(?:[ \t]*,[ \t]*(?:and[ \t]+|or[ \t]+)?|[ \t]+(?:and|or|&)[ \t]+|[ \t]*/[ \t]*"
                           r"|[ \t]*、[ \t]*)[\(\[]?[A-J](?![\w'’])[\)\]]?)+[ \t]*(?:[.。\n]|\Z)")
"""More letters listed after a cue's letter, to the end of the statement ("(A), (B), (C), and (D).", "A and C"): the
cue names no single choice."""
_LIST_STARTS = frozenset(", \t/、")
"""The characters :data:`_MORE_LETTERS` can start with (looked at before it is tried)."""
_BOLD_OPTION = re.compile(r"\*\*(?:[Oo]ption\s+)?\(?([A-J])[.):]\s+[^*\n]{1,120}\*\*")
_OPTION_VERDICT = re.compile(r"\s*(?:[-*•+]\s*)?(?:option\s+)?\(?([A-J])[.):]\s[^\n]{0,200}?\b(?:this|it|which)\s+"
                             r"(?:is|would\s+be)\s+(?:the\s+)?(?:most\s+)?(correct|right|true|accurate|best)\b[^\n]*",
                             re.IGNORECASE)
"""An option's line with a verdict that it is right ("- B. text: This is correct because ...")."""
_VERDICT_LINE = re.compile(
    r"[ \t]*(?:[-*•+][ \t]*)?(?:option[ \t]+)?[\(\[]?([A-J])[ \t]*[\)\].:：][ \t]*[-–—:]?[ \t]*"
    r"(?:(?P<no>incorrect|not[ \t]+correct|wrong|false|incorret[ao]|incorrect[ao]|incorrecte|falsch|fals[ao]|faux"
    r"|неверн|неправильн|sai\b|错误|錯誤|不正确|不正確|误|錯)|(?P<yes>correct|right|true|corret[ao]|correct[ao]|correcte"
    r"|richtig|wahr|verdadeir[ao]|verdader[ao]|vrai|верн|правильн|đúng|正确|正確|对|對))(?![a-z])", re.IGNORECASE)
"""An option's line that opens with its verdict ("A) Incorrect - ...", "- B) Correct. ...", "C: correta.", "D) True"):
options weighed one per line, each said right or wrong (true or false)."""
_VERDICT_WORDS = ("orrect", "ORRECT", "rong", "RONG", "ight", "IGHT", "rue", "RUE", "alse", "ALSE")
"""What an ASCII text needs for :data:`_VERDICT_LINE` to match in it (looked for before it is tried)."""
_BRACKETED_OPTION = re.compile(r"\s*[\(\[]\s*([A-J])\s*[\)\]]\s*[^()\[\]]{1,80}")
"""A line that is a bracketed option, letter and text ("(D) 18")."""
_BOLD = re.compile(r"\*\*([^*\n]{1,200})\*\*")
_FIRST_PHRASE = re.compile(r"\s*([^,.;:!?\n]{1,60})(?:[,.;:!?]|\s*$)")
_SENTENCES = re.compile(r"(?<=[.!?。])\s+")
"""Where one sentence ends and the next starts (the space after a full stop); :func:`_sentences` splits at it."""
_SENTENCE_GAP = re.compile(r"[.!?。]\s+")
"""A full stop and the space after it: :data:`_SENTENCES` with its full stop (a regex that opens with a character is
scanned for fast; one that opens by looking behind is tried at every character)."""
_LIST_ITEM = re.compile(r"\s*(?:[-*•+]|\d{1,2}[.)])\s*")
_SENTENCE_END = re.compile(r"(?<=[^\d])[.。;\n]|[.。;](?:\s|$)|\n")
_ONLY_LETTER = re.compile(r"(?:(?:option|choice|answer)\s*[:：]?\s*)?[\(\[]?\s*([A-Ja-j])\s*[\)\]]?\s*[.:]?",
                          re.IGNORECASE)
_LETTER_AND_TEXT = re.compile(r"(?:[\(\[]\s*([A-J])\s*[\)\]]|([A-J])\s*[).:])\s*\S")
_ALONE_LOWER = re.compile(r"[a-j]\s*(?:$|[.):：\n。、<]|[\u3000-\u9fff])")
_CJK_RIGHT = re.compile(r"(?:选项\s*([A-J])|([A-J])\s*选项)\s*(?:是|为)?\s*(?:正确|對|对)(?!与否)")
"""A Chinese statement that an option is right: "选项A正确", "A选项是正确的"."""
_FINAL_LINE = re.compile(r"[ \t]*(?:\*\*)?(?i:final[ \t]+)?(?i:answer)(?:\*\*)?[ \t]*:[ \t]*(?:\*\*)?[ \t]*"
                         r"\(?([A-J])\)?[ \t]*(?:\*\*)?[ \t]*\.?[ \t]*")
"""A last line that only answers: "Answer: C", "Final answer: (B).", "**Answer:** D" (a capital letter)."""
_LEADING = re.compile(r"\s*(?:answer\s*[:：]\s*)?\(?([A-Ja-j])\)?(?:[.:：)]\s|\s*\(|\s*\n|\s*$"
                      r"|(?<=[A-J])[。、，]?(?![项項選选])[\u3400-\u9fff])", re.IGNORECASE)
"""A text that opens with its choice, answer first: "c (retinal photocoagulation)", "b. add heparin", "d\n...",
"C。两颗星的线速度...", "A解析：..." (a capital followed by Chinese or Japanese text, not "A项", option A)."""
_CJK_CONCLUSION = re.compile(r"[ \t*#>]*(?:综上|总之|总而言之|因此|所以)")
"""A Chinese conclusion opening a line ("综上所述", "总之", "因此")."""
_CJK_OPTION_NAMED = re.compile(r"选项\s*([A-J])(?![A-Za-z])|(?<![A-Za-z])([A-J])\s*选?项")
"""An option named in Chinese: "选项A", "A项", "A选项"."""
_LEADING_GIVEN = re.compile(r"\s*([A-J])[:：](?=[\u3400-\u9fff])")
"""A text that opens with an option, letter and Chinese or Japanese text: "A:紧急避险行为，不承担刑事责任。..." (the
option given first, then why; not when another option follows, as in a listing "A:...;B:...")."""
_DENIED = re.compile(r"\b(?:not|n't|no|wrong|incorrect|false|eliminate[sd]?|rule[sd]? out|except)\b|不|错误|非",
                     re.IGNORECASE)
_BRACKETED = re.compile(r"[\(\[]\s*([A-Ja-j])\s*[\)\]]")
_FIRST_WORDS = ("answer", "correct", "right", "best", "true", "accurate", "choice")
"""The words :data:`_FIRST` needs (in lower case: it is case-sensitive), looked for before it is tried; its branch
for "the most ADJ choice" needs :data:`_MOST_FITTING` instead ("most" alone is too common to be worth a scan)."""
_MOST_FITTING = re.compile(r"most\s+[a-z]+\s+(?:choice|answer|option)\b")
"""What the "the most ADJ choice" branch of :data:`_FIRST` needs (a literal scan for "most" first: cheap)."""
_RIGHT_WORDS = ("correct", "right", "best", "true", "accurate")
"""The words the first branch of :data:`_NAMED_RIGHT` needs."""
_CUE_WORDS = ("ans", "correct", "incorrect", "mak", "leav", "conclus",
              "right", "best", "final", "closest", "most", "option", "choice", "resp", "it",
              "i ", "i'", "we ", "we'", "therefore", "thus", "hence", "so", "=", "答案", "选", "是", "回答", "答え",
              "正解", "正しい", "適切", "정답", "<answer", "(answer", "(x)", "only", "which", "antwort", "réponse",
              "ответ", "đáp", "cevap", "yanıt", "seçenek", "jawa", "उत्तर")
"""Where a cue can start (:data:`_CUE` is tried only there: a substring search is far cheaper than a regex tried
at every character)."""
_CUE_AT = {word: re.compile("(?:" + "|".join(branch for branch, starts in _CUE_BRANCHES if word in starts) + ")"
                            + _CUE_END, re.IGNORECASE) for word in _CUE_WORDS}
"""For each cue word, :data:`_CUE` with only the ways a cue opens with that word (in the same order): the same
match where the word starts, without trying the twenty other ways (a third of the time)."""
_BOUNDED = frozenset(("ans", "correct", "incorrect", "mak", "leav", "conclus",
                      "right", "best", "final", "closest", "most", "option", "choice", "resp",
                      "it", "i ", "i'", "we ", "we'", "therefore", "thus", "hence", "so", "only", "which", "antwort",
                      "réponse", "ответ", "đáp", "cevap", "yanıt", "seçenek", "jawa", "उत्तर"))
"""The words of :data:`_CUE_WORDS` that start a cue only after a word boundary (each branch of :data:`_CUE` that
starts with one opens with ``\\b``)."""
_NAMED, _BRACKETED_LETTER, _APOSTROPHE = 1, 2, 3
_MADE = ("mak", "leav")
"""The cue words of a cue that makes a letter the answer ("making A the correct answer")."""
_NEEDS = {"=": _NAMED, "which": _NAMED, "it": _BRACKETED_LETTER, "(answer": _BRACKETED_LETTER,
          "(x)": _BRACKETED_LETTER, "i'": _APOSTROPHE, "we'": _APOSTROPHE}
"""Words whose only branch of :data:`_CUE` needs more of the text: "= option B" and "which is option B" an
"option" or a "choice", "it's (B)" a bracket, "(answer)" and "(X)" too, "I'll" and "we'd" an apostrophe."""
_CJK_CHAR = re.compile("[\u3000-\uffff]")
"""A character of the Chinese, Japanese or Korean scripts (or wider): words written in them need one."""


def _script(text: str) -> int:
    """0: ASCII only; 1: with Chinese, Japanese or Korean characters; 2: beyond ASCII without them (accented,
    Cyrillic, Vietnamese). A cue word is looked for in a text of script 0 or of its own script."""
    return 0 if text.isascii() else 1 if _CJK_CHAR.search(text) else 2  # such a character is found early


_STARTS = {(script, named, bracketed, apostrophe): tuple(
    (word, word in _BOUNDED) for word in _CUE_WORDS
    if _script(word) in (0, script) and (named or _NEEDS.get(word) != _NAMED)
    and (bracketed or _NEEDS.get(word) != _BRACKETED_LETTER) and (apostrophe or _NEEDS.get(word) != _APOSTROPHE))
    for script in (0, 1, 2) for named in (False, True) for bracketed in (False, True) for apostrophe in (False, True)}
"""The words to look for (and whether each needs a word boundary before it), by the text's :func:`_script`,
whether it has an "option" or "choice", whether it has a bracket, and whether it has an apostrophe."""
_EXAMPLE = re.compile(r"(?:例如|比如|例：|e\.\s?g\.|\beg\b|for\s+example|for\s+instance|such\s+as|\bformat\b)"
                      r"[^\n]{0,40}\Z", re.IGNORECASE)
"""An echoed instruction before a cue ("reply in the format Answer: X, e.g. Answer: A"): the cue is no choice."""
_EXAMPLE_WORDS = {False: ("e.g", "example", "instance", "such as", "format"),
                  True: ("例", "比如", "e.g", "example", "instance", "such as", "format")}
"""Words :data:`_EXAMPLE` needs, for a text in ASCII and for one with other scripts (looked for before it is
tried)."""
_MARKER = re.compile(r"^[ \t#*>\-]*(?:final\s+answer|correct\s+answer|answer|ans|最终答案|正确答案|答案)"
                     r"[ \t*\]]*[:：\]][ \t*]*", re.IGNORECASE)
"""An answer marker opening a text's last line ("Answer:", "【答案】:"): what follows it is the final statement."""
_NONE_AFTER = re.compile(
    r"\s*(?:is|would\s+be|should\s+be|:|：|是|为)?\s*[\(\[]?\s*(?:none\s+of\s+(?:the\s+)?(?:above|options|choices|these|"
    r"them)|neither\b|no\s+(?:correct\s+)?(?:option|choice|answer)\b)"
    r"|\s+(?:cannot|can't|can\s+not)\s+be\s+(?:determined|decided|known)|\s+(?:is\s+)?(?P<either>either)\b",
    re.IGNORECASE)
"""After "answer": a statement that no option is the answer ("the answer is none of the above"), or that it is one
of several ("the answer is either (B) or (D)": whatever else the line states)."""
_ALL_RIGHT = re.compile(
    r"a(?<!\wa)ll\s+(?:(?:of\s+)?the\s+)?(?:two\s+|three\s+|four\s+|five\s+|given\s+)?(?:options|statements|choices|answers)\b"
    r"[^.\n]{0,60}?\b(?:are|were)\s+(?:all\s+)?(?:correct|true|right|valid)\b(?![^.\n]{0,40}\b(?:except|but)\b)",
    re.IGNORECASE)
"""A last line saying every option is right ("Therefore, all statements (A), (B), (C) and (D) are correct."): no
single choice (not "all options are correct except C"). (A word's start is checked after its "a": a regex that opens
with a character is scanned for fast.)"""
_LETTER_BEFORE = re.compile(r"[A-J][ \t]*[.．、:：)][ \t]*\Z")
"""An option's letter just before a statement (its text, not the writer's)."""
_NONE_CJK = re.compile(r"以上(?:选项)?(?:都|均)(?:不|错)|都不(?:对|正确)|无法(?:确定|判断|选择)"
                       r"|(?:题目|选项)(?:可能)?有误|(?:정답|답)\s*(?:은|는)?\s*[:：]?\s*없")
"""A Chinese or Korean statement that no option is the answer ("以上选项都不对", "题目可能有误", "정답: 없음")."""
_LISTED = re.compile(r"(?<![A-Za-z])(?:\(([A-J])\)|([A-J])(?=[).,;:]|\s+(?:and|or|&)\b|\s*$))")
"""The letters a final statement lists ("B and D", "(A) fever (C) cough"): more than one is no single choice."""
_JA_RIGHT = re.compile(r"(?<![A-Za-z])([A-Ja-j])\s*[:：.．)]\s*[^。\n\]]{0,40}\]?\s*(?:が|は)\s*"
                       r"(?:最も|正解|正しい|適切)")
"""A Japanese statement that an option is right: "d: 腎盂腎炎 が最も考えられます"."""
_JA_WORDS = ("最も", "正解", "正しい", "適切")
"""The words :data:`_JA_RIGHT` needs, looked for before it is tried (after their first characters: a search for one
character is fast in a text of Chinese or Japanese script, one for two is not)."""
_PLEASANTRY = re.compile(r"\s*(?:I\s+hope\s+(?:this|that|it)\s+helps|hope\s+this\s+helps|let\s+me\s+know|feel\s+free|"
                         r"if\s+you\s+have\s+any\s+(?:other|more|further)|good\s+luck)", re.IGNORECASE)
"""A closing courtesy line, passed over when looking for a text's last statement."""
_GIVEN = re.compile(r"[ \t]*(?:[-*•+][ \t]*)?([A-Ja-j])[ \t]*[:：.)][ \t]*\S[^\n]{0,200}")
"""A line that gives one option, its letter and its text ("C: The observed number of deaths ...", "- c. The animal
is a chimpanzee." after an introduction that states the answer)."""
_STATING = re.compile(r"\b(?:is|would\s+be)[ \t*]*[:：]\Z", re.IGNORECASE)
"""A line that introduces the answer itself ("... the most likely true statement is:"), not options to weigh."""
_OPTIONS_WORDS = ("option", "choice", "each", "following", "选项", "選択肢", "선택지", "보기", "各")
"""Words of a line that introduces options to weigh ("Let's look at each option:"), not the option given."""
_ANOTHER_OPTION = re.compile(r"(?<![A-Za-z])[A-J][ \t]*[:：)]")
"""Another option in the same line ("A: text; B: text"): a listing, not an option given."""
_OPTION_LINE = re.compile(r"^[ \t]*[\(\[]?([A-J])[ \t]*[\)\].:：、．][ \t]*(\S[^\n]{0,200})$", re.MULTILINE)
"""A line listing an option ("B: 2 mol", "(C) green"), for a text that lists its own options."""
_OPTION_LINE_AFTER_BREAK = re.compile("\n" + _OPTION_LINE.pattern[1:-1] + "(?=\n|\\Z)")
""":data:`_OPTION_LINE` after a line break (the line break first: a regex that opens with a character is scanned for
fast, one that opens with ``^`` is tried at every character)."""
_SENTENCE_BREAK = re.compile(r"[.!?。]\s+(?=\S)")
"""Where a sentence ends and the next starts."""
_LAST_BREAK = re.compile(r".*" + _SENTENCE_BREAK.pattern, re.DOTALL)
"""A line up to its last sentence end (:data:`_SENTENCE_BREAK`)."""
_STANDALONE = re.compile(r"[A-J](?<![\w'’\-/.][A-J])(?![\w'’\-/]|\.\w)")
"""A capital letter standing alone ("B", "(B)", "B."), not part of a word, a name ("B's"), a range ("A-1") or an
abbreviation ("U.S."). (The letter comes first, its left side is checked after it: a regex that opens with a
character class is scanned for fast.)"""
_NOT_A_LETTER = re.compile(_NOT_ARTICLE.pattern + r"|I\s+(?!is\b|was\b)[a-z]")
"""An unbracketed "A" or "I" that is an article or a pronoun ("A bit", "I cannot")."""
_CLOSING = frozenset(".!?。)]*\"”'’")
"""How a final sentence ends when it was not cut off: a full stop or a closing mark (or the letter itself)."""
_LISTING = re.compile(r"[A-J](?<![\w'’\-/.][A-J])\s*[:：]\s+\S")
"""An option weighed in a line ("D: We don't have enough information"): such a line states no choice ("a
alternativa C. é a correta" does not weigh one)."""
_LISTING_OPEN = re.compile(r"[\(\[]?[A-J][.．)\]]\s+\S")
"""A line that opens by weighing an option ("C. Lipids are ...", "(B) would mean ...")."""
_OPTION_WORD = re.compile(r"(?:option|choice|letter|answer|alternativ[ea]|opci[oó]n|op[cç][aã]o)\s*$", re.IGNORECASE)
"""A word that names a letter after it as an option ("option I")."""
_FINAL_WORDS = 30
"""Words of the longest last sentence read for a lone letter (a longer one is reasoning, not a statement)."""
_LINE = re.compile(r"^\s*(?:answer\s*[:：]?\s*)?[\(\[]?\s*([A-J])\s*[\)\]]?\s*[.。]?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class ChoiceAnswer(AnswerKind):
    r"""The letter a multiple-choice answer chooses (see the module docstring for the forms it reads).

    ``choices`` are the option texts in order (``None``: not known; :meth:`bind` takes them from a run's
    ``choices`` input); with them, a stated option text counts as its letter and only their letters count.
    ``letters`` are the letters allowed without options (A to J). ``numbered``: the prompt numbered the options
    1, 2, ... (as Korean exams do), so a number stated as the answer is its option's letter (without it a bare
    number is no choice: it may be an option's value). Answers compare by letter; a reference may be a letter,
    an option's text or, ``numbered``, an option's number.

    Examples:
        >>> from scaffold.answers import ChoiceAnswer
        >>> kind = ChoiceAnswer()
        >>> kind.extract(r"The ratio is \boxed{0.36}, so the correct option is **(B)**.")
        'B'
        >>> kind.extract(r"\boxed{\text{(B) } \sim 0.36}"), kind.extract("Answer: C"), kind.extract("Not (A).")
        ('B', 'C', None)
        >>> mc = ChoiceAnswer(choices=("54", "0.36", "7"))
        >>> mc.extract(r"So \boxed{0.36}."), mc.correct("B", "0.36"), mc.extract("Answer: (D)")
        ('B', True, None)
    """

    choices: tuple[str, ...] | None = None
    letters: str = LETTERS
    numbered: bool = False
    _options: Mapping[str, str] = field(init=False, repr=False, compare=False, hash=False)
    _words: Mapping[str, str] = field(init=False, repr=False, compare=False, hash=False)

    name = "choice"
    inputs = ("choices",)

    def __post_init__(self) -> None:
        if not isinstance(self.numbered, bool):
            raise AnswerKindError(f"choice: numbered is True or False, got {self.numbered!r}")
        if not isinstance(self.letters, str) or not self.letters or not set(self.letters) <= set(_CAPITALS) \
                or len(set(self.letters)) != len(self.letters):
            raise AnswerKindError(f"choice: letters are distinct capital letters, as 'ABCD', got {self.letters!r}")
        if self.choices is not None:
            object.__setattr__(self, "choices", tuple(str(c) for c in self.choices))
            object.__setattr__(self, "letters", LETTERS[: len(self.choices)] if len(self.choices) <= 10
                               else "".join(chr(ord("A") + i) for i in range(min(len(self.choices), 26))))
        options = {_plain(text): self.letters[i] for i, text in enumerate(self.choices or ()) if i < len(self.letters)}
        object.__setattr__(self, "_options", options)
        words = {_words(text).strip(): self.letters[i]
                 for i, text in enumerate(self.choices or ()) if i < len(self.letters)}
        object.__setattr__(self, "_words", words)

    @functools.cached_property
    def _features(self) -> Mapping[str, frozenset[str]]:
        """Each option's content words (:func:`option_features`), computed the first time the fallback needs them:
        most texts state a letter, and :meth:`bind` builds a kind per row."""
        given = {self.letters[i]: text for i, text in enumerate(self.choices or ()) if i < len(self.letters)}
        return option_features(given, _clean)

    @property
    def instruction(self) -> str:
        return "End with the letter of your choice, as: Answer: X"

    def bind(self, inputs: Mapping[str, Any]) -> ChoiceAnswer:
        given = inputs.get("choices")
        if self.choices is not None or not isinstance(given, Sequence) or isinstance(given, str) or not given:
            return self
        return ChoiceAnswer(choices=tuple(str(c) for c in given), numbered=self.numbered)

    def describe(self) -> dict[str, Any]:
        return {"kind": self.name, "letters": self.letters, **({"numbered": True} if self.numbered else {})}

    def options(self) -> dict[str, Any]:
        """``numbered``, and letters other than A to J when no options are given (a row's options come with it)."""
        custom = self.choices is None and self.letters != LETTERS
        return {**({"numbered": True} if self.numbered else {}), **({"letters": self.letters} if custom else {})}

    def extract(self, text: str) -> str | None:
        final = None if self.numbered else _final_line_answer(text)
        if final is not None and final in self.letters:  # "Answer: C" on the last line, as the instruction asks
            return final
        return self._extract(text)

    def _extract(self, text: str) -> str | None:
        """:meth:`extract` without its shortcut for a last line that only answers."""
        found = self._read(text)
        if found is None and self.choices and self._features:  # no choice stated: the option its conclusion paraphrases
            marked = _clean(text)
            found = None if _BOX in marked else closest_option(self._features, _TOKENS.sub(" ", marked))
        if found or self._options:
            return found or None
        listed = _listed_options(text)  # the text lists its own options: "the answer is green" can be read
        if not listed:
            return None
        return ChoiceAnswer(choices=listed, numbered=self.numbered)._read(text, listed=True) or None

    def _read(self, text: str, *, listed: bool = False) -> str | None:
        """The choice a text states; ``""`` when its final statement names no single option (``listed``: the
        options are the ones the text lists itself, so the lines of that listing state nothing)."""
        if not text.isascii() or self.numbered:
            text = _numbers_as_letters(text, self.letters, self.numbered)
        end = _reasoning_end(text)
        if end >= 0:  # a reasoning model's answer, after its reasoning, is its final one
            found = self._read(text[end:], listed=listed) if text[end:].strip() else None
            if found is not None:
                return found
        if _may_rank(text) and (ranked := _RANKED.search(text)) is not None:  # "First Choice: B"
            return ranked.group(1).upper() if ranked.group(1).upper() in self.letters else ""
        for window in WINDOWS:  # the end first: a choice stated there is the last one stated
            if window < len(text):
                found = self._stated(text[-window:])
                if found is not None:
                    return found
        marked = _clean(text)
        found = self._stated(text, marked)
        if found is not None:
            return found
        clean = _TOKENS.sub(" ", marked.replace(_BOX, " "))
        lines = [line for line in clean.splitlines() if line.strip()]
        while len(lines) > 1 and _PLEASANTRY.match(lines[-1]):
            lines.pop()
        line = lines[-1].strip() if lines else ""
        tail = _last_sentence(line)  # the text's last sentence
        if len(lines) > 1 and _OPTION_LINE.match(line) and _OPTION_LINE.match(lines[-2]):
            tail = ""  # the text ends in a listing of options ("(C) 05/15/2017\n(D) 06/22/2017"): no statement
        alone = self._alone(lines, listed) or self._before_rationale(clean, listed)
        if alone:
            return alone
        verdict = self._verdicts(lines) if not clean.isascii() or _contains(clean, _VERDICT_WORDS) else None
        if verdict is not None:  # options weighed one per line, each said right or wrong: "" when not one is right
            return verdict
        return (self._bold_option(text) or self._last_bracketed(tail)
                or self._leading(_after_thinking(clean)) or self._only_bracketed(clean) or self._judged_option(lines)
                or self._final_letter(line, tail.strip()) or self._concluded(line))

    def key(self, answer: str) -> str | None:
        """The letter an answer (or a reference) names: a letter, ``(B) 54``, or an option's text."""
        return self._as_choice(answer) or self.extract(answer)

    def _stated(self, text: str, marked: str | None = None) -> str | None:
        """The last choice a text states by a box or a cue, ``None`` when it states none that way (``marked``: the
        text already cleaned)."""
        if marked is None:
            marked = _clean(text)  # boxes marked by a NUL before their brace
        clean = marked.replace(_BOX, " ")  # the same length: positions agree
        best: tuple[int, str] | None = None

        def found(at: int, letter: str | None) -> None:
            nonlocal best
            if letter is not None and (best is None or at >= best[0]):
                best = (at, letter)

        for start, content in _boxes(marked):
            if len(content) <= _LONGEST_CHOICE:  # longer is no choice (and nested boxes would cost n squared)
                found(start, self._as_choice(content))
        low = clean.lower()
        wide = not low.isascii()  # a text with no other script skips the checks for Chinese and Japanese forms
        scan = _scan(clean, low)
        for m in reversed(scan.cues[-_CUES_TRIED:]):  # the last cue stating a choice is the one that counts
            before = max(0, m.start() - 60)  # an echoed example's words come just before its cue
            if not (scan.example_between(low, before, m.start()) and _EXAMPLE.search(clean, before, m.start())):
                letter = self._after_cue(clean, m.end(), made=low.startswith(_MADE, m.start()))
                if letter is not None:
                    found(m.start(), letter)
                    break
        for m in _CJK_RIGHT.finditer(clean, 0 if best is None else best[0]) if wide and "选项" in clean else ():
            letter = m.group(1) or m.group(2)
            found(m.start(), letter if letter in self.letters else None)
        for at, letter in self._said_right(clean, None if best is None else best[0], scan.first):
            found(at, letter)
        if wide and ("最" in clean or "正" in clean or "適" in clean) and _contains(clean, _JA_WORDS):
            for m in _JA_RIGHT.finditer(clean):
                found(m.start(), m.group(1).upper() if m.group(1).upper() in self.letters else None)
        none_at = self._none_stated(clean, low)
        if none_at is not None and (best is None or best[0] <= none_at):
            return ""
        return None if best is None else best[1]

    def _said_right(self, clean: str, after: int | None, first: int | None = None) -> list[tuple[int, str | None]]:
        """Letters said to be right after ``after`` (where the last choice so far was stated; ``None``: none was):
        "(D) is the correct answer"; where none was stated and none is said so, an option named with its text and
        said to be right (weaker than a cue). ``first``: where the last word of :data:`_FIRST_WORDS` starts in the
        text's lower case (:class:`_Scan`; ``None``: not known, looked for here)."""
        out: list[tuple[int, str | None]] = []
        if first is None:  # not known: looked for (in the text itself; any case is as good: the regexes decide)
            worded = _contains(clean, _FIRST_WORDS, after or 0)
        else:
            worded = first >= (after or 0)
        worded = worded or _MOST_FITTING.search(clean, after or 0) is not None
        if worded:  # only a later statement can change the choice
            for m in _FIRST.finditer(clean, after or 0):
                if m.group(1) in self.letters and not (m.start() and clean[m.start() - 1].isalnum()):
                    out.append((m.start(), m.group(1)))
        if after is None and not out and ")" in clean:
            stated = _NAMED_RIGHT_HINT.search(clean) is not None
            if stated or (worded and _contains(clean, _RIGHT_WORDS)):
                out = [(at, letter if letter in self.letters else None) for at, letter in _named_right(clean, stated)]
        return out

    def _none_stated(self, clean: str, low: str) -> int | None:
        """Where a text's last line states that no single option is the answer: "Answer: B and D", "the answer is
        none of the above", "【答案】: 题目可能有误" (``None`` when it does not)."""
        body = clean.rstrip()
        start = body.rfind("\n") + 1
        last = body[start:]
        at = low.find("answer", start)
        while at >= 0:
            if (none := _NONE_AFTER.match(low, at + 6)) and not _EXAMPLE.search(last, 0, at - start):
                return len(clean) if none.group("either") else at
            at = low.find("answer", at + 6)
        if not last.isascii() and (m := _NONE_CJK.search(last)) is not None and not _LETTER_BEFORE.search(
                last, max(0, m.start() - 4), m.start()):  # "A. 无法确定" gives option A's text
            return start + m.start()
        if ("all" in last or "All" in last or "ALL" in last) and (m := _ALL_RIGHT.search(last)) is not None:
            return start + m.start()  # "all options are correct"
        m = _MARKER.match(last)
        if m is None:
            return None
        content = _TOKENS.sub("", last[m.end():]).strip(" *.。")
        if not content:
            return None
        listed = {a or b for a, b in _LISTED.findall(content)}
        if len(listed) > 1:
            return start
        if listed or self._as_choice(content) is not None or self._after_cue(last, m.end()) is not None:
            return None
        return start  # a value or a sentence that is no option: "Answer: 54" without the options

    def _alone(self, lines: list[str], listed: bool = False) -> str | None:
        """With no box or cue: the last line that is only a choice, a last line that is an option ("(D) 18") or
        gives one (:meth:`_given`), a line that is an option's letter and text (not one of the text's own listing,
        ``listed``), or an option the text names (:meth:`_named_option`)."""
        for line in reversed(lines):
            m = _LINE.match(line)
            if m and m.group(1).upper() in self.letters and (m.group(1).isupper() or "(" in line or ":" in line):
                return m.group(1).upper()
        if lines:
            m = _BRACKETED_OPTION.fullmatch(lines[-1])
            if m and m.group(1) in self.letters and not (len(lines) > 1 and _OPTION_LINE.match(lines[-2])):
                return m.group(1)
        if lines and (given := self._given(lines)) is not None:
            return given
        if not self._options or not lines:
            return None
        seen: set[str] = set()
        stating = []  # a line that is an option, letter and text: "(D) Tokyo"; not a line of the text's own listing
        for line in lines:
            m = _OPTION_LINE.fullmatch(line)
            if m and self._options.get(_plain(m.group(2))) == m.group(1):
                if not listed or m.group(1) in seen:
                    stating.append(m.group(1))
                seen.add(m.group(1))
        if stating:
            return stating[-1]
        if listed and _OPTION_LINE.fullmatch(lines[-1]):  # the text ends in its own listing: it names no option
            return None
        return self._named_option(lines)

    def _given(self, lines: list[str]) -> str | None:
        """A last line that gives one option, letter and text ("C: The observed number ..."), as the whole text or
        after a line that introduces it with a colon ("The primary measure can be defined as:"). Not when another
        line lists an option (a listing, or options weighed one by one) or the introduction speaks of options, unless
        the introduction states the answer ("the most likely true statement is:", :data:`_STATING`)."""
        m = _GIVEN.fullmatch(lines[-1])
        if m is None or m.group(1).upper() not in self.letters or _ANOTHER_OPTION.search(lines[-1], m.end(1) + 1):
            return None
        stating = len(lines) > 1 and _STATING.search(lines[-2].rstrip(" *")) is not None
        if not stating and (m.group(1).islower() or not lines[-1].lstrip()[:1].isalnum()):
            return None  # a bullet or a small letter ("- **A**: ...", "a. It"): an option weighed, unless stated
        if len(lines) > 1:
            intro = lines[-2].rstrip(" *")
            if not intro.endswith((":", "：")) or (not stating and _contains(intro.lower(), _OPTIONS_WORDS)):
                return None
            if not stating and any(_OPTION_LINE.match(line) for line in lines[:-1]):
                return None
        return m.group(1).upper()

    def _last_bracketed(self, tail: str) -> str | None:
        """The one bracketed letter of the text's last sentence (``tail``): "... so it takes 10 days. (C)", "... is
        (B) I."."""
        alone = _BRACKETED.fullmatch(tail.strip().rstrip("."))
        if alone is not None:  # "... under GASB standards. (B)": the letter alone closes the text
            return alone.group(1).upper() if alone.group(1).upper() in self.letters else None
        if _denies(tail):  # "The answer is not (A).", "(B) is wrong."
            return None
        letters = {m.upper() for m in _BRACKETED.findall(tail)}
        return self._only(letters)

    def _only_bracketed(self, clean: str) -> str | None:
        """The one bracketed letter a text names at all, in a sentence that does not deny it: "... helps decrease
        variance (D). When multiple trees ..."."""
        if "(" not in clean and "[" not in clean:
            return None
        found = list(_BRACKETED.finditer(clean))
        if not found or len({m.group(1).upper() for m in found}) != 1:
            return None
        m = found[-1]
        start = max(clean.rfind(".", 0, m.start()), clean.rfind("\n", 0, m.start())) + 1
        ends = [at for at in (clean.find(".", m.end()), clean.find("\n", m.end())) if at >= 0]
        if _denies(clean[start: min(ends) if ends else len(clean)]):
            return None
        letter = m.group(1).upper()
        return letter if letter in self.letters and m.group(1).isupper() else None

    def _judged_option(self, lines: list[str]) -> str | None:
        """Options weighed one per line, only one of them said to be right: "B. turn sunlight into food energy:
        This is correct because ..." among lines that say "incorrect"."""
        right = set()
        for line in lines:
            m = _OPTION_VERDICT.match(line)
            if m is not None:
                right.add(m.group(1))
        return self._only(right)

    def _before_rationale(self, clean: str, listed: bool) -> str | None:
        """The choice given alone (:meth:`_alone`) just before a heading that opens its rationale: "... is:\n\nD.
        Schistosomiasis\n\n###Rationale: ..."."""
        rationale = _RATIONALE.search(clean) if "\n" in clean else None
        if rationale is None:
            return None
        lines = [line for line in clean[: rationale.start()].splitlines() if line.strip()]
        return self._alone(lines, listed) if lines else None

    def _verdicts(self, lines: list[str]) -> str | None:
        """Options weighed one per line, each opening with its verdict ("A) Incorrect - ...", "B) Correct - ...",
        "C) Incorrect - ..."): the one said right, ``""`` when not exactly one is (none, or several), ``None`` when
        fewer than two options are weighed so. The last verdict on an option counts."""
        said: dict[str, bool] = {}
        for line in lines:
            m = _VERDICT_LINE.match(line)
            if m is not None:
                said[m.group(1)] = m.group("yes") is not None
        if len(said) < 2:
            return None
        right = [letter for letter, yes in said.items() if yes]
        return right[0] if len(right) == 1 and right[0] in self.letters else ""

    def _final_letter(self, line: str, sentence: str) -> str | None:
        """With nothing else stated: the one letter the text's last sentence (``sentence``, of its last ``line``)
        names ("So the right pick here is B.", "Respuesta: B"), unless that sentence denies, is long or cut off, or
        its line weighs options ("D: We don't have enough information ...")."""
        if not sentence or len(sentence) > 300 or (sentence.count(" ") >= _FINAL_WORDS - 1
                                                   and len(sentence.split()) > _FINAL_WORDS):
            return None
        end = len(sentence) - 1
        if sentence[end] not in _CLOSING and not (sentence[end] in LETTERS and not _after_word(sentence, end)):
            return None  # cut off mid-sentence
        letters = set()
        for m in _STANDALONE.finditer(sentence):
            at = m.start()
            bracketed = (at and sentence[at - 1] in "([") or sentence[at + 1: at + 2] in (")", "]")
            if (not bracketed and _NOT_A_LETTER.match(sentence, at)
                    and not _OPTION_WORD.search(sentence, max(0, at - 16), at)):
                continue  # "A" as an article, "I" as a pronoun (but "option I precisely matches")
            letters.add(m.group())
        if len(letters) != 1 or _LISTING.search(line) or _LISTING_OPEN.match(line) or _denies(sentence):
            return None
        letter = letters.pop()
        return letter if letter in self.letters else None

    def _only(self, letters: set[str]) -> str | None:
        """The one letter of ``letters`` when there is exactly one and it is one of this kind's, else ``None``."""
        return next(iter(letters)) if len(letters) == 1 and next(iter(letters)) in self.letters else None

    def _concluded(self, line: str) -> str | None:
        """The one option a last line that opens with a Chinese conclusion names: "综上所述，选项A是不正确的，因为...",
        "综上所述，……因此C项描述是错误的。" (what a question asking for the wrong statement is answered with)."""
        if line.isascii() or _CJK_CONCLUSION.match(line) is None:
            return None
        named = {a or b for a, b in _CJK_OPTION_NAMED.findall(line)}
        return self._only(named)

    def _leading(self, clean: str) -> str | None:
        """The choice a text opens with, when it states none later: "c (retinal photocoagulation)"."""
        m = _LEADING.match(clean)
        if m is None and (m := _LEADING_GIVEN.match(clean)) is not None and _ANOTHER_OPTION.search(clean, m.end()):
            return None  # "A:...;B:...": the options listed, none chosen
        return m.group(1).upper() if m and m.group(1).upper() in self.letters else None

    def _bold_option(self, text: str) -> str | None:
        """An option set in bold near the end, letter and text: "The compound is **D. ethyl 4-aminobenzoate**."."""
        found = list(_BOLD_OPTION.finditer(text[-400:]))
        if found and found[-1].group(1) in self.letters:
            last = found[-1]
            line = text[-400:][: last.start()].rsplit("\n", 1)[-1]
            listed = not line.strip() or _LIST_ITEM.fullmatch(line) is not None  # "* **D) ...:** ..." weighs options
            if not listed or len({m.group(1) for m in _BOLD_OPTION.finditer(text)}) == 1:
                return last.group(1)
        if self._options:  # an option's text in bold: "the product is **2-methylbutan-2-ol**"
            named = [self._options.get(_plain(span)) for span in _BOLD.findall(text[-600:])]
            named = [letter for letter in named if letter]
            return named[-1] if named else None
        return None

    def _named_option(self, lines: list[str]) -> str | None:
        """With the options known and no choice stated: the one option the text opens with ("No, ..."), else the
        one option the last sentence that names any names ("... is Tokyo."), among the last line's last three."""
        first = _FIRST_PHRASE.match(lines[0])
        if first is not None and (letter := self._options.get(_plain(first.group(1)))) is not None:
            return letter
        sentences = [part for part in _sentences(lines[-1].strip()) if part.strip()]
        for sentence in reversed(sentences[-3:]):  # the last sentences that name an option ("... So" ends some)
            named = self._named_in(sentence)
            if named:
                return named.pop() if len(named) == 1 else None
        return None

    def _after_cue(self, clean: str, at: int, made: bool = False) -> str | None:
        """The choice after a cue that ends at ``at`` (``made``: the cue makes a letter the answer, "making A the
        correct answer", where "A" is no article)."""
        rest = clean[at: at + 200]
        m = _AFTER_CUE.match(rest)
        if m is not None:
            letter = m.group(1)
            bracketed = rest[: m.start(1)].strip() != ""
            if letter.islower() and not bracketed and not _ALONE_LOWER.match(rest):
                letter = ""  # "the answer is a bit...": a lowercase letter counts only on its own
            elif letter in "AI" and not bracketed and not made and _NOT_ARTICLE.match(rest[m.start(1):]):
                letter = ""  # "the answer is A number...", "I'll choose I think"
            if letter and letter.upper() in self.letters:
                listing = rest[m.end(): m.end() + 1] in _LIST_STARTS and letter.isupper()
                if listing and _MORE_LETTERS.match(rest, m.end()):
                    return ""  # "the answer is (A), (B) and (D).": no single choice
                return letter.upper()
            if letter:
                return None
        if self._options:  # "the answer is 54": an option's text
            sentence = _SENTENCE_END.split(rest, maxsplit=1)[0]
            found = self._options.get(_plain(sentence))
            if found is None and not _denies(sentence):  # "Answer: John lived in a state park.": the one option named
                named = self._named_in(sentence)
                found = named.pop() if len(named) == 1 else None
            return found
        return None

    def _named_in(self, sentence: str) -> set[str]:
        """The letters of the options whose text a sentence holds, as whole words (an option written in Chinese or
        Japanese characters anywhere in it)."""
        words = _words(sentence)
        named = {letter for text, letter in self._words.items() if text and f" {text} " in words}
        if not sentence.isascii():  # Chinese or Japanese option texts, named without spaces around them
            flat = _plain(sentence)
            named |= {letter for text, letter in self._options.items()
                      if len(text) >= 2 and _CJK_CHAR.search(text) and text in flat}
        return named

    def _as_choice(self, content: str) -> str | None:
        """The letter a short answer (a boxed content, a reference) names, ``None`` when it names none."""
        clean = _clean(content).strip()
        m = _ONLY_LETTER.fullmatch(clean)
        if m is None:  # "(A) 54", "A) 54", "B. 0.36", "C: text"
            m = _LETTER_AND_TEXT.match(clean)
            letter = (m.group(1) or m.group(2)) if m else None
        else:
            letter = m.group(1).upper()
        if letter is not None:
            return letter if letter in self.letters else None
        if self._options:
            return self._options.get(_plain(clean))
        return None


def _may_rank(text: str) -> bool:
    """Whether a text may hold a ranked answer (:data:`_RANKED`: "First Choice: B / Second Choice: D"), by the words
    it needs."""
    return ("irst" in text and "econd" in text) or ("IRST" in text and "ECOND" in text)


def _final_line_answer(text: str) -> str | None:
    """The letter of a text whose last line only answers ("Answer: C", "**Final answer:** (B).", :data:`_FINAL_LINE`),
    where nothing else in the text can change what the whole reading gives (that line's cue is the last, and no later
    statement or reasoning mark can override it): an ASCII text read in one pass, without reasoning marks, escaped
    newlines or a ranked answer. ``None`` where that does not hold: the whole reading decides."""
    body = text.rstrip()
    m = _FINAL_LINE.fullmatch(body, body.rfind("\n") + 1)
    if m is None or len(text) > WINDOWS[0] or ">" in text or not text.isascii() or "\\n\\n" in text:
        return None
    return None if _may_rank(text) else m.group(1)


def _named_right(clean: str, stated: bool) -> list[tuple[int, str]]:
    """Where an option is named with its text and said to be right (:data:`_NAMED_RIGHT`) or stated
    (:data:`_NAMED_AFTER_IS`), with its letter: the matches of either, left to right and not overlapping (at one
    place, the first kind first). Two regexes that each scan fast, rather than one of both that tries every
    character. ``stated``: whether :data:`_NAMED_RIGHT_HINT` ("C) A") is in ``clean``; without it no statement
    can match, and none is looked for."""
    found = []
    for m in _NAMED_RIGHT.finditer(clean):  # it matches from the ")" of "C)"
        start = m.start() - 2 if m.start() > 1 and clean[m.start() - 2] == "(" else m.start() - 1
        found.append((start, 0, m.end(), m.group(1)))
    if stated:
        at = 0
        while (match := _NAMED_AFTER_IS.search(clean, at)) is not None:
            if match.start() and (clean[match.start() - 1].isalnum() or clean[match.start() - 1] == "_"):
                at = match.start() + 1  # within a word ("this", "maybe"): no statement
                continue
            found.append((match.start(), 1, match.end(), match.group(1)))
            at = match.end()
    out, end = [], -1
    for start, _, stop, letter in sorted(found):
        if start >= end:
            out.append((start, letter))
            end = stop
    return out


class _Scan(NamedTuple):
    """What one pass of a key's automaton finds in a cleaned text (:func:`_scan`)."""

    cues: list[re.Match[str]]
    """Every cue, in order (:func:`_cues`)."""
    first: int | None
    """Where the last word of :data:`_FIRST_WORDS` starts in the text's lower case (-1: nowhere; ``None``: not looked
    for, where the automaton was not used)."""
    examples: list[tuple[int, int]] | None
    """Where each word of :data:`_EXAMPLE_WORDS` (for the text's script) stands in its lower case (``None``: not
    looked for)."""

    def example_between(self, low: str, start: int, end: int) -> bool:
        """Whether a word of :data:`_EXAMPLE_WORDS` stands in ``low[start:end]``."""
        if self.examples is None:
            return _contains(low[start:end], _EXAMPLE_WORDS[not low.isascii()])
        for at, stop in self.examples:
            if start <= at and stop <= end:
                return True
        return False


def _cues(clean: str, low: str) -> list[re.Match[str]]:
    """Every cue of a cleaned text (``low``: its lower case), in order: the matches of :data:`_CUE`, left to right
    and not overlapping, tried only where a cue word of the text's key starts (see :func:`_matches_at_words`)."""
    return _scan(clean, low).cues


def _scan(clean: str, low: str) -> _Scan:
    """A text's cues (:func:`_cues`), and, in the same pass of the automaton, where the words the rest of the reading
    looks for stand (:class:`_Scan`): a pass finds them all at once, where a substring search per word takes a pass
    each."""
    if len(low) != len(clean):  # a character whose lower case is longer: positions would not agree
        return _Scan(list(_CUE.finditer(clean)), None, None)
    key = (_script(low), "option" in low or "choice" in low, "(" in low or "[" in low, "'" in low)
    matcher = _cue_matcher(key)
    if matcher is None:
        return _Scan(_matches_at(_CUE, clean, sorted(_word_starts(low, _STARTS[key])), _CUE_AT), None, None)
    automaton, patterns, bounded, first, example = matcher
    found = automaton.find_matches_as_indexes(low, overlapping=True)
    found.sort(key=_START)  # by where each word starts: no two cue words start at one place (none begins another)
    out: list[re.Match[str]] = []
    examples: list[tuple[int, int]] = []
    end = last_first = -1
    for index, at, stop in found:  # what _matches_at does, in one loop over the automaton's finds
        if first[index]:
            last_first = at
        pattern = patterns[index]
        if pattern is None:  # a word looked for, no cue word
            if example[index]:
                examples.append((at, stop))
            continue
        if at < end or (bounded[index] and at and (low[at - 1].isalnum() or low[at - 1] == "_")):
            continue
        m = pattern.match(clean, at)
        if m is not None:
            out.append(m)
            end = m.end()
    return _Scan(out, last_first, examples)


_START = operator.itemgetter(1)
"""Where a find of the automaton starts (it gives the word's index, its start and its end)."""


@functools.cache
def _cue_matcher(key: tuple[int, bool, bool, bool]) -> tuple[Any, tuple[re.Pattern[str] | None, ...], tuple[bool, ...],
                                                              tuple[bool, ...], tuple[bool, ...]] | None:
    """An Aho-Corasick automaton (``ahocorasick_rs``) of the cue words of ``_STARTS[key]`` and of the words of
    :data:`_FIRST_WORDS` and :data:`_EXAMPLE_WORDS` (for the key's script), with, for each word, its part of
    :data:`_CUE` (:data:`_CUE_AT`; ``None`` for a word that opens no cue), whether it is bounded, whether it is a
    word of :data:`_FIRST_WORDS` and whether one of :data:`_EXAMPLE_WORDS`. It finds every place where any of them
    starts in one pass over a text, where a substring search per word takes about thirty (``None`` where the
    package does not import: the words are searched for one by one, with the same result). One per key, built when
    first needed: a text's automaton holds only the cue words worth finding in it."""
    try:
        import ahocorasick_rs
    except ImportError:
        return None
    cues = [word for word, _ in _STARTS[key]]
    words = cues + [word for word in (*_FIRST_WORDS, *_EXAMPLE_WORDS[key[0] != 0]) if word not in cues]
    cue_bounded = dict(_STARTS[key])  # each cue word, whether it is bounded
    return (ahocorasick_rs.AhoCorasick(words), tuple(_CUE_AT[word] if word in cue_bounded else None for word in words),
            tuple(cue_bounded.get(word, False) for word in words), tuple(word in _FIRST_WORDS for word in words),
            tuple(word in _EXAMPLE_WORDS[True] for word in words))


def _word_starts(low: str, words: Sequence[tuple[str, bool]]) -> list[tuple[int, str]]:
    """Every place where one of ``words`` starts in ``low`` (one marked bounded only at a word's start), with its
    word, word by word: a substring search per word."""
    starts: list[tuple[int, str]] = []
    for word, bounded in words:
        at = low.find(word)
        while at >= 0:
            if not (bounded and at and (low[at - 1].isalnum() or low[at - 1] == "_")):
                starts.append((at, word))
            at = low.find(word, at + 1)
    return starts


def _matches_at_words(pattern: re.Pattern[str], text: str, low: str, words: Sequence[tuple[str, bool]],
                      by_word: Mapping[str, re.Pattern[str]] | None = None) -> list[re.Match[str]]:
    """The matches of ``pattern`` in ``text`` that start where one of ``words`` starts in ``low`` (its lower case,
    as long), left to right and not overlapping: the regex is tried only there (a substring search is far cheaper
    than a regex tried at every character). A word marked bounded starts a match only at a word's start ("so", not
    "also"). ``by_word``: for each word, the part of ``pattern`` that can match where that word starts (the same
    match, found without trying the alternatives that open otherwise); ``pattern`` itself where two words start."""
    return _matches_at(pattern, text, sorted(_word_starts(low, words)), by_word)


def _matches_at(pattern: re.Pattern[str], text: str, starts: list[tuple[int, str]],
                by_word: Mapping[str, re.Pattern[str]] | None = None) -> list[re.Match[str]]:
    """The matches of ``pattern`` in ``text`` from the places ``starts`` (in order, each with the word that starts
    there), left to right and not overlapping (see :func:`_matches_at_words`)."""
    out, end, tried = [], -1, -1
    for i, (at, word) in enumerate(starts):
        if at < end or at == tried:
            continue
        tried = at
        shared = i + 1 < len(starts) and starts[i + 1][0] == at
        m = (pattern if by_word is None or shared else by_word[word]).match(text, at)
        if m is not None:
            out.append(m)
            end = m.end()
    return out


def _contains(text: str, words: tuple[str, ...], start: int = 0) -> bool:
    """Whether ``text`` holds one of ``words`` at or after ``start`` (a loop of substring searches: faster than a
    regex of alternatives)."""
    for word in words:
        if text.find(word, start) >= 0:
            return True
    return False


def _denies(text: str) -> bool:
    """Whether a sentence denies (:data:`_DENIED`); an ASCII one is first looked through for the words it needs."""
    if text.isascii():
        low = text.lower()
        if not ("no" in low or "n't" in low or "wrong" in low or "incorrect" in low or "false" in low
                or "eliminat" in low or "rule" in low or "except" in low):
            return False
    return _DENIED.search(text) is not None


def _sentences(text: str) -> list[str]:
    """A text split into its sentences, each with its full stop (``_SENTENCES.split(text)``, by
    :data:`_SENTENCE_GAP`)."""
    parts, done = [], 0
    for m in _SENTENCE_GAP.finditer(text):
        parts.append(text[done: m.start() + 1])
        done = m.end()
    parts.append(text[done:])
    return parts


def _last_sentence(line: str) -> str:
    """A line's last sentence: what follows its last sentence end (:data:`_SENTENCE_BREAK`), found by a match that
    takes the whole line and gives back from its end (linear in the line, and short for the usual short tail)."""
    m = _LAST_BREAK.match(line)
    return line if m is None else line[m.end():]


_TOKENS = re.compile(r"<\|[^|>]{1,40}\|>|<[a-z_]{1,40}\|>|<\|[a-z_]{1,40}>|</?s>|<eo[asne]>|<eos>|<end_of_turn>",
                     re.IGNORECASE)
"""A model's special tokens left in its output ("</s>", "<eoa>", "<|im_end|>", "<channel|>")."""
_REASONING_ENDS = ("</think>", "</thinking>", "</reasoning>", "◁/think▷", "<channel|>", "<|end_of_thought|>",
                   "<|channel|>final<|message|>")
"""Marks that end a reasoning model's reasoning (DeepSeek-R1 and Qwen, Claude's and others' tags, Kimi, Gemma,
gpt-oss): what follows is its answer."""
_REASONING_MARK = re.compile("|".join(re.escape(mark) for mark in _REASONING_ENDS))


def _listed_options(text: str) -> tuple[str, ...] | None:
    """The options a text lists itself, A first, each on its own line ("A: ...", "(B) ..."; not a line that opens with
    a verdict, "B) Incorrect."); ``None`` for fewer than two."""
    listed: dict[str, str] = {}
    for m in _OPTION_LINE_AFTER_BREAK.finditer("\n" + text):  # each line after a line break (one is put first)
        if not _VERDICT_LINE.match(m.group(), 1):  # "B) Incorrect.": an option weighed, not listed
            listed.setdefault(m.group(1), m.group(2).strip())
    count = 0
    while count < len(LETTERS) and LETTERS[count] in listed:
        count += 1
    return tuple(listed[letter] for letter in LETTERS[:count]) if count >= 2 else None


_BOX = "\x00"
_BRACES = re.compile(r"[{}]")
_CUES_TRIED = 256
"""Cues tried from a text's end before its earlier ones are given up: a real output states its choice within its
last few cues (the corpus's texts have at most 22 in all), and a loop of cues that name nothing ("答案是答案是...")
would otherwise cost a reading of what follows each."""
_LONGEST_CHOICE = 2000
"""Characters of the longest boxed content read as a choice (a letter, a letter with its option, an option's
text)."""
_WRAPPER_DEPTH = 8
"""Wrappers nested deeper than this (``\\text{\\text{...}}``) are left as they are: unwrapping costs a pass each."""
_CIRCLED = "①②③④⑤⑥⑦⑧⑨⑩"
"""Circled numbers, as Korean and Japanese exams number their options: each is its option's letter."""
_WIDE = {**dict(zip("（）：［］【】「」『』｢｣．", "():[][][][][].", strict=True)),
         **{number: f"({LETTERS[i]})" for i, number in enumerate(_CIRCLED)}}
"""Wide marks as ASCII ones, and circled numbers as their options' bracketed letters."""
_ESCAPED_NEWLINE = re.compile(r"\\n(?![a-z])")
"""An escaped newline left in a text, not the start of a LaTeX command (``\\neq``, ``\\nabla``)."""
_WIDE_CHARS = re.compile(f"[（）：［］【】「」『』｢｣．{_CIRCLED}]")


_RANKED = re.compile(r"\bfirst\s+choice\s*[:：]\s*[\(\[]?([A-J])\b(?=.{0,80}?\bsecond\s+choice\s*[:：])",
                     re.IGNORECASE | re.DOTALL)
"""A ranked answer, its first choice followed by its second ("First Choice: B\nSecond Choice: D"): the first is
the answer."""
_NUMBER_WORD = re.compile(r"(\d+)\s*번(?!째)")
"""A Korean option number ("3번", option 3; not "3번째", the third): a number of 1 to 10 not after a dot or a comma
(checked where it matches: a regex that opens with a digit is scanned for fast)."""
_ARABIC_OPTIONS = ("أ", "ب", "ج", "د", "ه")
"""The letters Arabic exams name their options with, in order (alif, ba, jim, dal, ha: A to E)."""
_ARABIC_OPTION = re.compile(r"(?<![\u0600-\u06ff])(أ|ب|ج|د|هـ|ه)(?![\u0600-\u06ff])")
"""An Arabic option letter standing alone ("الإجابة النهائية هي [ب]"), not a letter of a word."""
_GIVEN_NUMBER = re.compile(r"(?:\A|[:：][ \t]*\n\s*)[ \t]*(10|[1-9])(?=[ \t]*[:：)][ \t]*\S[^\n]{0,200}\s*\Z)")
"""A number that opens a text's one line, or its last line after one that ends with a colon, followed by its option's
text ("2: Thymoma", "3) Thymoma"; not "1. ...", which opens a numbered step as often): with numbered options, the
option given (read as :data:`_GIVEN`)."""
_GIVEN_NUMBER_FIRST = re.compile(_GIVEN_NUMBER.pattern.replace(r"(?:\A|[:：][ \t]*\n\s*)", "", 1))
_GIVEN_NUMBER_AFTER = re.compile(_GIVEN_NUMBER.pattern.replace(r"(?:\A|[:：][ \t]*\n\s*)", r"[:：][ \t]*\n\s*", 1))
r""":data:`_GIVEN_NUMBER` at the text's start (tried there only) and after a colon (a regex that opens with a character
is scanned for fast; one that opens with ``\A`` or it is tried at every character)."""
_RATIONALE = re.compile(r"\n[ \t#*>]*(?:rationale|explanation|reasoning|justification|explicaci[oó]n|explica[cç][aã]o"
                        r"|explication|begründung|açıklama|обоснование|解析|解释|理由)\b[ \t*]*[:：\n]", re.IGNORECASE)
"""A heading that opens a rationale after the answer ("\n\n###Rationale:", "Explanation:"): what comes before it is
the answer, read when nothing in the whole text states a choice."""
_ONE_NUMBERED_LINE = re.compile(
    r"(?:\s|\\n)*(10|[1-9])(?=[.:)][ \t]+(?![*_#])[^\s:*](?:(?!\\n)[^\n:*]){0,300}(?:\s|\\n)*\Z)")
"""A text that is one line opening with a number and its option's text (" 1. Болезненность при пальпации ...",
"\\n\\n3. Tardive dyskinesia is ..."): with numbered options, the option given (numbered steps take more lines; a
line with a heading in bold or a colon is a step)."""
_ONLY_NUMBER = re.compile(r"^([ \t]*[\(\[]?)(10|[1-9])(?=[\)\]]?[ \t]*[.。]?[ \t]*$)", re.MULTILINE)
_NUMBER_AFTER = re.compile(
    r"((?:answer|정답|답|答案|答|回答|resposta|respuesta|réponse|antwort|ответ)[\"'”’\]】]?"
    r"(?:\s+(?:correct[ao]?|incorrect[ao]?|corret[ao]|incorret[ao]|correcte|incorrecte|final|finale|richtige))?"
    r"\s*(?:[:：=]|\s+(?:is|es|é|est|ist)\b|은|는|是|为)?\s*[:：]?\s*[\"'“]?\s*[\(\[]?\s*)(10|[1-9])(?![\d.,]?\d)",
    re.IGNORECASE)
_MARKER_WORDS = tuple((word, False) for word in ("answer", "정답", "답", "答", "resposta", "respuesta", "réponse",
                                                  "antwort", "ответ"))
"""Where :data:`_NUMBER_AFTER` can start (each of its words holds one of these; "答案" and "回答" hold "答")."""
_BOXED_NUMBER = re.compile(r"(\\boxed\s*\{\s*)(10|[1-9])(?=\s*\})")


def _after_word(text: str, at: int) -> bool:
    """Whether ``text[at]`` follows a word's character, an apostrophe, a hyphen, a slash or a dot (so is no letter
    standing alone)."""
    return at > 0 and (text[at - 1].isalnum() or text[at - 1] in "_'’-/.")


def _after_thinking(text: str) -> str:
    """What a reasoning model wrote after its reasoning (after the last mark that ends it), or the whole text."""
    end = _reasoning_end(text)
    return text if end < 0 else text[end:]


def _reasoning_end(text: str) -> int:
    """Where a reasoning model's reasoning ends: after the last of :data:`_REASONING_ENDS` (-1: none)."""
    if ">" not in text and "▷" not in text:  # every mark ends with one of them (a character is found fastest)
        return -1
    end = -1
    for m in _REASONING_MARK.finditer(text):
        end = m.end()
    return end


def _numbers_as_letters(text: str, letters: str, numbered: bool) -> str:
    """A text with its option numbers written as letters: Korean option numbers ("3번") and Arabic option letters
    standing alone ("[ب]") always (circled numbers are translated by :func:`_clean`); with ``numbered`` (the
    options were numbered 1, 2, ...), also a number a line holds alone, one after an answer marker ("Answer: 3",
    ``"answer": 3``, "정답: 3"), a boxed one and one that gives an option ("2: Thymoma"). A number beyond the
    options stays."""
    def letter(number: str) -> str | None:
        return letters[int(number) - 1] if 1 <= int(number) <= len(letters) else None

    def option_number(m: re.Match[str]) -> str:  # "3번": C; "1.5번", "123번": left as they are
        after_point = m.start() > 0 and m.string[m.start() - 1] in ".,"
        found = None if after_point or len(m.group(1)) > 2 else letter(m.group(1))
        return found or m.group()

    if "번" in text:
        text = _NUMBER_WORD.sub(option_number, text)
    if "ا" in text and _contains(text, _ARABIC_OPTIONS):  # alif, the commonest Arabic letter: Arabic text at all
        text = _ARABIC_OPTION.sub(lambda m: LETTERS[_ARABIC_OPTIONS.index(m.group(1)[0])], text)
    if not numbered:
        return text
    for pattern in (_ONLY_NUMBER, _BOXED_NUMBER) if "boxed" in text else (_ONLY_NUMBER,):
        text = pattern.sub(lambda m: m.group(1) + (letter(m.group(2)) or m.group(2)), text)
    given = _GIVEN_NUMBER_FIRST.match(text) or _GIVEN_NUMBER_AFTER.search(text) or _ONE_NUMBERED_LINE.match(text)
    if given is not None and (found := letter(given.group(1))) is not None:
        text = text[: given.start(1)] + found + text[given.end(1):]
    low = text.lower()
    if len(low) != len(text):  # a character whose lower case is longer: positions would not agree
        return _NUMBER_AFTER.sub(lambda m: m.group(1) + (letter(m.group(2)) or m.group(2)), text)
    out, done = [], 0
    for m in _matches_at_words(_NUMBER_AFTER, text, low, _MARKER_WORDS):
        out += [text[done: m.start(2)], letter(m.group(2)) or m.group(2)]
        done = m.end(2)
    return "".join(out) + text[done:]


def _boxes(marked: str) -> list[tuple[int, str]]:
    """Every box of a cleaned text (:func:`_clean` marks them): where it starts and its content."""
    if marked.count(_BOX) > 16:  # many boxes (maybe nested): braces matched in one pass, not once per box
        return _many_boxes(marked)
    out = []
    at = marked.find(_BOX)
    while at >= 0:
        depth, i = 1, at + 2
        while i < len(marked) and depth:
            depth += {"{": 1, "}": -1}.get(marked[i], 0)
            i += 1
        if depth == 0:
            out.append((at, marked[at + 2: i - 1]))
        at = marked.find(_BOX, at + 1)
    return out


def _many_boxes(marked: str) -> list[tuple[int, str]]:
    """:func:`_boxes` by one pass over the text's braces."""
    closing: dict[int, int] = {}
    opened: list[int] = []
    for m in _BRACES.finditer(marked):
        if m.group() == "{":
            opened.append(m.start())
        elif opened:
            closing[opened.pop()] = m.start()
    out = []
    at = marked.find(_BOX)
    while at >= 0:
        if at + 1 in closing:
            out.append((at, marked[at + 2: closing[at + 1]]))
        at = marked.find(_BOX, at + 1)
    return out


def _clean(text: str) -> str:
    """A text with its markup read through: wrappers unwrapped, emphasis and math delimiters gone, and every
    ``\\boxed{`` (or ``\\fbox{``) marked as NUL and its brace."""
    text = text.replace(_BOX, " ")
    if "\\" in text and "\\n\\n" in text:  # a text stored with its newlines escaped (a JSON dump): its lines back
        text = _ESCAPED_NEWLINE.sub("\n", text.replace("\\n\\n", "\n\n"))
    if not text.isascii() and (wide := _WIDE_CHARS.findall(text)):  # each wide mark found, replaced (a translation
        for char in set(wide):  # of every character is slower; what replaces one is ASCII, so the order is free)
            text = text.replace(char, _WIDE[char])
    if "\\" in text:  # LaTeX: boxes marked, wrappers unwrapped (nested ones too)
        text = _BOXED.sub(_BOX + "{", text)
        previous, depth = None, 0
        while previous != text and depth < _WRAPPER_DEPTH:  # nested ones too, up to a depth
            previous, text, depth = text, _WRAPPERS.sub(r"\1", text), depth + 1
        text = _BARE_WRAPPER.sub("", text)  # "\text A": a wrapper without braces
    return _strip_marks(text)


def _strip_marks(text: str) -> str:
    """A text without the marks of :data:`_MARKS` (what ``_MARKS.sub("", text)`` gives), found fast: none where the
    text holds no character or pair a mark needs (a bullet's "*" or a name's "_" alone is none), and, without a
    backslash, by plain replacements. Those agree with the regex where they run: its marks are then "**", "__",
    "$" and "`", of different characters, each found left to right as a replacement finds it; "$" and "`" go last
    (taking one away may join two "*" into a pair the regex never sees), and "**" and "__" are not both taken away
    where a text has "**" and any "_" (taking "**" out of "_**_" would join a pair the regex never sees)."""
    if not (("*" in text and "**" in text) or "\\" in text or "$" in text or ("_" in text and "__" in text)
            or "`" in text):  # a character is looked for before a pair: a search for one is far faster
        return text
    if "\\" in text or ("**" in text and "_" in text):
        return _MARKS.sub("", text)
    return text.replace("**", "").replace("__", "").replace("$", "").replace("`", "")


_PUNCTUATION = re.compile(r"[\s.,;:!?'\"()\[\]{}]+|\\sim|\\approx|~|≈")


def _words(text: str) -> str:
    """A text as its words, lower case, single-spaced between spaces: for finding an option's text in a sentence."""
    plain = _clean(text).replace(chr(92) + "pi", "π").replace("−", "-").lower()
    return f" {' '.join(_PUNCTUATION.sub(' ', plain).split())} "


_NUMBER_STARTS = "-.0123456789\\"
"""How a number :func:`~scaffold._answers.as_number` reads may open ("-0.5", ".5", "3/4", "\\frac{3}{4}")."""


def _plain(text: str) -> str:
    """An option text for matching: markup gone, lower case, no spaces or punctuation; a plain number its value; the
    minus sign written as a hyphen ("(x − 4)" as "(x - 4)")."""
    clean = _clean(text).strip().rstrip(".").replace("\\pi", "π").replace("−", "-")
    compact = clean.replace("$", "").replace(" ", "")
    value = as_number(compact) if compact[:1] in _NUMBER_STARTS else None  # a text that opens otherwise is no number
    if value is not None:
        return f"#{value}"
    return _PUNCTUATION.sub("", clean.lower())


register_kind("choice", ChoiceAnswer)
