"""Answer kinds (scaffold.answers): extraction and equivalence of math, integer, choice, text and JSON answers."""

from __future__ import annotations

from typing import Any

import pytest
from choice_corpus import choice_of, corpus, held_out
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

import scaffold as sf
from scaffold.answers import (
    ChoiceAnswer,
    IntegerAnswer,
    JsonAnswer,
    MathAnswer,
    TextAnswer,
    answer_kind,
    kind_names,
    normalise_text,
)


def test_the_corpus_is_large_labelled_and_mostly_real() -> None:
    rows = corpus()
    assert len(rows) >= 300
    assert len({r["text"] for r in rows}) == len(rows)
    assert all(r["label"] is None or (len(r["label"]) == 1 and r["label"] in "ABCDEFGHIJ") for r in rows)
    assert sum(r["source"] != "written" for r in rows) >= 150
    assert sum(held_out(r) for r in rows) / len(rows) >= 0.5  # at least half held out


def test_choice_reads_the_development_half_of_the_corpus() -> None:
    """The half the extractor was developed on: all but a few of the real outputs there (97.4% of 1,722 when this
    bound was set: the misses left need the question to read, "the correct answer is the one that states:", a
    negative question's conclusion, conditional choices, or an option named in other words than the row gives), and
    every written phrasing."""
    rows = [r for r in corpus() if not held_out(r)]
    wrong = [(r["text"][-120:], r["label"], choice_of(r).extract(r["text"])) for r in rows
             if choice_of(r).extract(r["text"]) != r["label"]]
    assert len(wrong) <= 0.03 * len(rows), wrong
    written = [r for r in rows if r["source"] == "written"]
    assert all(choice_of(r).extract(r["text"]) == r["label"] for r in written)


@pytest.mark.parametrize(("text", "letter"), [
    (r"The ratio is \boxed{0.36}, so the correct option is **(B)**.", "B"),  # a boxed value, then the choice
    (r"\boxed{\text{(B) } \sim 0.36}", "B"),
    (r"Thus \boxed{(A) 54}", "A"),
    ("the correct option is **(A)**", "A"),
    ("Answer: C", "C"),
    ("At first (A), but on reflection the answer is (C).", "C"),  # the last stated choice
    ("The answer is not (A).", None),
    ("The answer is a matter of taste.", None),  # an article is not a choice
    ("答案是 B", "B"),
])
def test_choice_reads_the_forms_the_issue_names(text: str, letter: str | None) -> None:
    assert ChoiceAnswer().extract(text) == letter


@pytest.mark.parametrize(("text", "letter"), [
    ("(B) looks likely.\nAnswer: (A) fever (C) cough", None),  # a final statement listing two: no single choice
    ("Option C looks right.\nAnswer: B and D", None),
    ("(A) fails. So the answer is (None of the above).", None),
    ("选项B正确。\n【答案】: 题目可能有误 <eoa>", None),  # the final statement names no option
    ("Answer: C\n\nRespond with the letter only, e.g. Answer: A", "C"),  # an echoed format instruction
    ("正确答案：B\n\n请写在[正确答案]和<eoa>之间，例如[正确答案]A<eoa>。", "B"),
    ("Answer: (B) 0.36\n\n(A) is wrong because...", "B"),  # one letter with its text, then an explanation
    ("因此，选D。", "D"),
    ("正解は c です。", "C"),
    ("症状から考えると｢a: 心筋梗塞｣が最も可能性が高いと考えられます。", "A"),
    ("Options:\n(A) red\n(B) blue\n(C) green\n\nThe answer is green.", "C"),  # options listed in the text itself
    ('{\n  "reasoning": "Amylase starts it.",\n  "answer": "B"\n}', "B"),  # a JSON answer
    ("<think>\nIt needs wind.\n</think>\n<answer>c</answer>", "C"),  # a tagged answer, lower case
    ("따라서 정답은 C입니다.", "C"),
    ("The others do not apply.\n\n(X) D", "D"),  # an echoed "(X)" placeholder, then the letter
    ("So the most likely outcome is C) A truncated protein.", "C"),
    ("Thus, option B) 30° is the correct answer.", "B"),
    ("The system is called a khipu (D). It recorded census data.", "D"),  # the one letter the text names
    ("Each student differs. The correct answer cannot be determined.", None),
    ("* **A) Atresia:** oligemic fields.\n* **B) Tetralogy:** the X-ray typically shows", None),  # weighing options
    ('{"step_by_step_thinking": "It blocks the enzyme.", "answer_choice": "D"}', "D"),  # a suffixed answer key
    ("the correct answer is 4, which is option a.", "A"),
    ("\\boxed{\\text A}", "A"),  # a wrapper without braces
    ("- A. soil: This is incorrect.\n- B. sunlight: This is correct because of photosynthesis.", "B"),
    ('It fits option D.\\n\\nanswer_choice": "D"}}', "D"),  # a JSON dump with its newlines escaped
    ("$\\neq$ 0 for (A), so\\n\\nThe answer is (B)", "B"),  # ... while \neq stays a LaTeX command
    ("Note: I chose option C as the most likely answer because it meets every condition.", "C"),
    ("In short, **Option B: 5-hydroxyheptan-4-one** is the most likely product.", "B"),  # a bold option
])
def test_choice_reads_final_statements_echoes_and_listed_options(text: str, letter: str | None) -> None:
    assert ChoiceAnswer().extract(text) == letter


@pytest.mark.parametrize(("text", "letter"), [
    ("So the right pick here is B.", "B"),  # no cue the rules know: the one letter of the last sentence
    ("I'm going with C.", "C"),
    ("Among the options, C is the only one that fits.", "C"),
    ("Respuesta: B", "B"),
    ("Ответ: B", "B"),
    ("After weighing them all.\n\n=> D", "D"),
    ("The most likely diagnosis is B) pneumonia.", "B"),
    ("I cannot determine the answer from the information given.", None),  # "I" is a pronoun
    ("A careful reading settles it.", None),  # "A" is an article
    ("I believe the answer is likely B, though A is possible.", None),  # two letters: no single choice
    ("Whatever the rest, definitely not B.", None),  # a denial
    ("Let me look at each option in turn. Option B says that the", None),  # cut off mid-sentence
    ("The other options: A: long - not typical. B: wide - not typical. C", None),  # a line weighing options
    ("So B is ruled out.\n\nC: possible, but unproven.\n\nD: We don't have enough information to say.", None),
    ("The U.S. and the E.U. differ.", None),  # abbreviations are no letters
])
def test_choice_reads_one_letter_in_a_last_sentence_when_nothing_else_states_a_choice(text: str,
                                                                                     letter: str | None) -> None:
    assert ChoiceAnswer().extract(text) == letter


@pytest.mark.parametrize(("text", "letter"), [
    ("First Choice: B\nSecond Choice: D\nThird Choice: C", "B"),  # a ranked answer: its first choice
    ("My first choice was A. But the answer is C.", "C"),  # ... only when a second choice follows
    ("<think>\n\n</think>\n\nd: Staphylococcus aureus", "D"),  # the answer opens the part after the reasoning
    ("因此，正确答案是：\n\nC．强化了世俗观念", "C"),  # a wide full stop after the letter
    ("Thus, option I precisely matches the phrasing.", "I"),  # "I" after "option" is a letter
    ("a alternativa D. não é correta. Resposta: E.", "E"),  # a letter with a stop in a sentence weighs nothing
    ("최종 정답 : 3번", "C"),  # a Korean option number
    ("4번", "D"),
    ("3번째 선택지는 틀렸다.", None),  # "the third": no option number
    ("정답: ③", "C"),  # a circled option number
    ("4번: 적절하다.\n5번: 적절하지 않다.\n\n최종 정답: 없음", None),  # "final answer: none"
    ("<think>So the answer is F.</think>\n\nB", "B"),  # the answer after the reasoning is the final one
    ("<think>So the answer is F.</think>\n\nI hope this helps.", "F"),  # ... when it states one
    ("Final decision: Option I.\n<channel|>I", "I"),  # Gemma's reasoning channel
    ("<|channel|>analysis<|message|>Likely C.<|end|><|start|>assistant<|channel|>final<|message|>Answer: D", "D"),
    ("الفرضية (ب) أكثر احتمالاً.\n\nالإجابة النهائية: الإجابة النهائية هي [[ب]].", "B"),  # Arabic option letters
    ("**الإجابة النهائية: الإجابة النهائية هي [أ]**", "A"),
    ("كتب الطالب الجواب في الدفتر.", None),  # letters inside Arabic words are no options
    ("Portanto, a alternativa D condiz.\n\n✅ **Resposta: D**", "D"),  # answer cues in other languages
    ("La respuesta correcta es (B).", "B"), ("La bonne réponse est C.", "C"), ("Die richtige Antwort ist C.", "C"),
    ("Правильный ответ: B", "B"), ("Đáp án đúng là C.", "C"),
])
def test_choice_reads_ranked_answers_reasoning_models_and_korean_option_numbers(text: str,
                                                                               letter: str | None) -> None:
    assert ChoiceAnswer().extract(text) == letter


@pytest.mark.parametrize(("text", "letter"), [
    ("Therefore, A remains the most accurate choice regarding countries with higher rates.", "A"),
    ("In conclusion, while option E is the most plausible choice, sailors vary.", "E"),  # "the most ADJ choice"
    ("A is the most tempting answer, but it is wrong.", None),  # ... not a choice that tempts
    ("The primary measure can be defined as:\n\nC: \"observed deaths over expected deaths\"", "C"),  # given
    ("B: Thymoma", "B"),  # the whole text gives an option
    ("Let's look at each option:\n\nA. Recommended serving size.", None),  # an option weighed, cut off
    ("首先看各个选项：\n\nA: 胎盤の後面", None),
    ("A:紧急避险行为;B:意外事件;C:过失致人死亡罪;D:重大责任事故罪。", None),  # every option in one line
    ("The options:\nA. summer\nB. fall\nC. winter\nD. spring\n\nThe latest sunset is in", None),  # a listing
])
def test_choice_reads_an_option_given_and_one_said_to_be_the_most_fitting(text: str, letter: str | None) -> None:
    assert ChoiceAnswer().extract(text) == letter


@pytest.mark.parametrize(("text", "letter"), [
    ("A) Incorrect - it binds the wrong site.\nB) Correct - it blocks the channel.\nC) Incorrect - no.", "B"),
    ("- **A) Incorreta.** Não.\n- **B) Correta.** Sim.\n- **C) Incorreta.** Não.", "B"),  # Portuguese, in bold
    ("A: incorrect, too small.\nB: wrong unit.\nC: correct, as computed.\nD: incorrect.", "C"),
    ("- **G**: Incorrect. More is needed.\n- **I**: Correct. All nutrients.\n- **J**: Incorrect. Both", "I"),
    ("A) Correct - yes.\nB) Correct - also.\nC) Incorrect.", None),  # two said right: no single choice
    ("A) Incorrect.\nB) Incorrect.", None),  # none said right
    ("A) Correctly stated.\nB) Correctly stated too.\nC) Incorrect.\nThe answer is (A).", "A"),  # no verdicts
    ("A) Incorrect.\nB) Correct.\nC) Incorrect.\n\nAnswer: C", "C"),  # a cue states the choice
    ("A) True\nB) False\nC) False\nD) False", "A"),  # true or false
    ("A) True\nB) False\nC) True\nD) False", None),  # two true: no single choice
])
def test_options_weighed_one_per_line_choose_the_one_said_right(text: str, letter: str | None) -> None:
    """A walk-through whose lines open with their verdicts ("A) Incorrect - ...") chooses its one option said
    right, when no box or cue states a choice."""
    assert ChoiceAnswer().extract(text) == letter


@pytest.mark.parametrize(("text", "letter"), [
    ("This directly contradicts Statement 4, making **C** the correct answer. The others are less tied.", "C"),
    ("Russia and Greece smoke more than France, leaving option A as the best choice.", "A"),
    ("So it is (B). Russia smokes more, making A the correct choice.", "A"),  # "A" made the answer: no article
    ("The most likely diagnosis is option E: impetigo contagiosa.\n\nRationale: honey-coloured crusts.", "E"),
    ("Looking at the options, 0.14 is option G.", "G"),
    ("This is option A's flaw; the others hold.", None),  # an option's, not an option stated
    ("The incorrect statement is (B).", "B"),  # a question asking which is wrong
    ("La respuesta incorrecta es: C.", "C"),
    ("Therefore, all statements (A), (B), (C), and (D) are correct.", None),  # every option right
    ("(A) is correct. (B) is correct. (C) is correct.\n\nTherefore, all options are correct.", None),
    ("All options are correct except C, so the answer is C.", "C"),
    ("The most common cause is:\n\nD. Schistosomiasis\n\n###Rationale:\nIt is prevalent in the region.", "D"),
    (": D \nExplanation: materiality levels do matter.\nReferences: AICPA (2020).", None),  # a cut fragment
    ("FIRST CHOICE: B\nSECOND CHOICE: D\nTHIRD CHOICE: C", "B"),  # a ranked answer in capitals
])
def test_choice_reads_a_letter_made_the_answer_negative_questions_and_answers_before_their_rationale(
        text: str, letter: str | None) -> None:
    assert ChoiceAnswer().extract(text) == letter


@pytest.mark.parametrize(("text", "letter"), [
    ("The answer is (A), (B), (C), and (D).", None),  # several letters after a cue: no single choice
    ("So the answer is A and C.", None),
    ("The answer is A, B is wrong.", "A"),  # another letter, but not a list that ends the statement
    ("Final reasoning: patience is rewarded.\n\nAnswer: <E>", "E"),  # a letter in angle brackets
    ("(e) bored: the most accurate description.\n\nThe answer is <b>", "B"),
    ('Therefore, the answer is:\n\n```json\n{\n  "response": "H",\n  "reasoning": "x"\n}\n```', "H"),
    ("Let's check the options:\n(A) 06/08/1933\n(B) 06/06/2017\n(C) 05/15/2017\n(D) 06/22/2017", None),  # listed
    ("So the answer is (B) 18.", "B"),
])
def test_choice_reads_lists_after_cues_angle_brackets_and_json_responses(text: str, letter: str | None) -> None:
    assert ChoiceAnswer().extract(text) == letter


@pytest.mark.parametrize(("text", "letter"), [
    ("C。两颗星的线速度与质量成反比，所以选项C是不正确的。", "C"),  # a capital, then Chinese text
    ("A解析：在上述选项中，A项的说法是错误的。", "A"),
    ("A项正确，B项错误。", None),  # "A项" is option A, discussed
    ("答案是：A. 无法确定解析：条件不足以确定 p 的值。", "A"),  # "无法确定" is option A's text here
    ("这些条件不足以确定，因此答案无法确定。", None),  # ... and the writer's statement here
    ("However, option A is the only choice that can be true if interpreted correctly.", "A"),
    ("Given these evaluations, the most likely true statement is:\n\n- **c. The animal is a chimpanzee.**", "C"),
    ("Let's weigh them for the following reasons:\n\n- **A**: Lymphocytes B make antibodies, but", None),
])
def test_choice_reads_leading_letters_before_chinese_text_and_options_stated_after_an_introduction(
        text: str, letter: str | None) -> None:
    assert ChoiceAnswer().extract(text) == letter


@pytest.mark.parametrize(("text", "letter"), [
    ("Seçenek: D\n\nAçıklama: IV. cümlede balığın yaşadığı bölgenin adı anlatılmış.", "D"),  # Turkish
    ("Doğru cevap: B", "B"),
    ("The correct answer is either \\boxed{(B)} or \\boxed{(D)} or \\boxed{(E)}.", None),  # one of several
    ("The answer is either B or C.\nFinal answer: C", "C"),  # ... settled on a later line
    ('Thus, the correct answer is:\n\n```json\n{"correct_answer_key":"c"}\n```', "C"),  # a JSON key
    ('{"final_answer": "B", "why": "x"}', "B"),
    ("Mengingat pertimbangan ini, jawaban yang benar adalah:\n\nJawaban Akhir: B. Terpusat", "B"),  # Indonesian
    ("Jawapan: D", "D"),  # Malay
    ("इसलिए, सही उत्तर विकल्प (D) है", "D"),  # Hindi
])
def test_choice_reads_turkish_and_indonesian_cues_json_keys_and_answers_that_are_one_of_several(
        text: str, letter: str | None) -> None:
    assert ChoiceAnswer().extract(text) == letter


@pytest.mark.parametrize(("text", "letter"), [
    ("**Conclusion:** Option A is the only statement that is universally false.", "A"),  # a conclusion, as a cue
    ("Conclusion: E correctly summarizes the findings.", "E"),
    ("Conclusión: la B.", "B"),
    ("Conclusion: A patient with these signs needs imaging. The answer is (D).", "D"),  # "A": an article
    ("**Conclusion:**\nGiven the location of pain, the fracture is displaced.", None),  # prose: no letter
    ("A resposta correta é a B.", "B"),  # Portuguese and Spanish: an article before the letter
    ("La respuesta correcta es la C, porque ...", "C"),
    ("La respuesta es A.", "A"),
    ("A:紧急避险行为，不承担刑事责任。\n\n根据《刑法》第二十一条规定，……", "A"),  # option A given first
    ("A:紧急避险行为;B:意外事件;C:过失致人死亡罪", None),  # ... the options listed
    ("……\n\n综上所述，选项A是不正确的，因为人权与法律权利在内容上并不一致。", "A"),  # a Chinese conclusion
    ("……\n\n综上所述，因为公约规定了最低保护标准，因此C项描述是错误的。", "C"),
    ("……\n\n综上所述，A项和B项都不正确。", None),  # names two
])
def test_choice_reads_conclusions_articles_before_letters_and_chinese_conclusions(text: str,
                                                                                 letter: str | None) -> None:
    assert ChoiceAnswer().extract(text) == letter


def test_an_option_written_with_a_minus_sign_matches_the_same_text_written_with_a_hyphen() -> None:
    kind = ChoiceAnswer(choices=("(x − 2)(x + 2)(x − 1)", "(x + 1)(x + 4)(x − 2)", "(x + 1)(x − 4)(x − 2)"))
    assert kind.extract('{"answer": "(x + 1)(x - 4)(x - 2)}"') == "C"
    assert ChoiceAnswer(choices=("−3", "3")).extract("The answer is -3") == "A"


def test_choice_with_options_in_chinese_or_japanese_reads_an_option_named_without_spaces() -> None:
    kind = ChoiceAnswer(choices=("腹部造影CT", "経皮的肝生検", "薬剤リンパ球刺激試験", "血清セルロプラスミン測定",
                                 "抗ミトコンドリア抗体測定"))
    assert kind.extract("原発性胆汁性胆管炎が疑われ，抗ミトコンドリア抗体測定が診断に最も有用であるため。") == "E"
    assert kind.extract("経皮的肝生検か腹部造影CTが必要である。") is None  # two options named: no single choice


def test_choice_with_options_reads_the_one_option_a_conclusion_paraphrases() -> None:
    """No choice stated: the option whose content the end of the text holds (other words, other languages)."""
    tendons = ChoiceAnswer(choices=("El tendón del músculo tibial posterior.", "El ligamento peroneo-astragalino "
                                    "anterior.", "El tendón del músculo flexor largo del dedo gordo."))
    text = "Weighing each structure...\n\nSo the posterior tibial tendon is the most likely affected structure."
    assert tendons.extract(text) == "A"
    croup = ChoiceAnswer(choices=("「人工呼吸管理を行います」", "「β2刺激薬吸入を行います」",
                                  "「アドレナリン吸入を行います」"))
    assert croup.extract("クループ症候群が考えられる。クループ症候群の治療としてアドレナリン吸入が適切である。") == "C"
    # it abstains where a paraphrase could be either, or no answer
    assert tendons.extract("Either the tibial tendon or the flexor tendon of the big toe (flexor largo).") is None
    assert tendons.extract(text + "\n\nNone of these fits perfectly, though.") is None
    assert tendons.extract(r"The answer is \boxed{12}. The posterior tibial tendon is most likely.") is None
    pairs = ChoiceAnswer(choices=("True, False", "False, True", "True, True"))  # the same words in two options
    assert pairs.extract("Statement 1 is false and statement 2 is true.") is None


@given(st.lists(st.text(max_size=40), min_size=2, max_size=5), st.text(max_size=600))
def test_a_paraphrased_option_is_one_of_the_options_or_none(choices: list[str], text: str) -> None:
    """Property: the last resort answers one of the given options' letters, or nothing, and never raises."""
    from scaffold.answers._option_text import closest_option, option_features

    letters = "ABCDE"[: len(choices)]
    found = closest_option(option_features(dict(zip(letters, choices))), text)
    assert found is None or found in letters
    assert ChoiceAnswer(choices=tuple(choices)).extract(text) in (None, *letters)


def test_numbered_options_read_a_qualified_answer_word_before_the_number() -> None:
    numbered = ChoiceAnswer(numbered=True)
    assert numbered.extract("La respuesta correcta es 3") == "C"
    assert numbered.extract("\\n\\nLa respuesta incorrecta es: 2. Las cifras de glucemia.") == "B"


def test_the_lines_of_a_texts_own_listing_state_no_choice() -> None:
    """A text that lists its options is read with them, but the listing's own lines choose nothing: a text cut
    off while it weighs them states no choice, and an option's line repeated after the listing does."""
    weighing = ("Let's reason:\n\nA. summer\nB. fall\nC. winter\nD. spring\n\n"
                "The latest sunset depends on the tilt of the Earth.\n\n4")
    assert ChoiceAnswer().extract(weighing) is None
    assert ChoiceAnswer().extract(weighing[:-1] + "So:\nA. summer") == "A"


@pytest.mark.parametrize(("text", "letter"), [
    ("2: Thymoma", "B"), ("The most likely diagnosis is:\n\n4) Decrease interocclusal distance", "D"),
    ("1. The question asks about the season.\n2. Summer has the longest days.", None),  # numbered steps
    (" 1. Болезненность при пальпации в левом реберно-позвоночном", "A"),  # one line: an option given
    ("\\n\\n3. Tardive dyskinesia is an involuntary movement disorder", "C"),  # after escaped newlines
])
def test_numbered_options_read_an_option_given_by_its_number(text: str, letter: str | None) -> None:
    assert ChoiceAnswer(numbered=True).extract(text) == letter


def test_numbered_options_read_a_stated_number_as_its_letter() -> None:
    """With the options numbered 1, 2, ... (``numbered=True``), a number stated as the answer is its option's
    letter; without it a bare number is no choice, and a number beyond the options stays none."""
    numbered = ChoiceAnswer(numbered=True)
    for text, letter in [("Answer: 3", "C"), ('{"answer": 2, "why": "..."}', "B"), ("so \\boxed{4}", "D"),
                         ("It must be this one.\n\n1", "A"), ("정답: 3", "C"), ("The answer is 12.", None)]:
        assert numbered.extract(text) == letter, text
        assert ChoiceAnswer().extract(text) is None, text
    assert ChoiceAnswer(choices=("x", "y"), numbered=True).extract("Answer: 3") is None  # two options only
    assert numbered.key("3") == "C" and numbered.correct("Answer: 2", "B")
    bound = numbered.bind({"choices": ["x", "y", "z"]})
    assert bound.numbered and bound.letters == "ABC"
    assert numbered.describe()["numbered"] is True and "numbered" not in ChoiceAnswer().describe()
    assert sf.answers.answer_kind("choice", numbered=True) == numbered


def test_choice_passes_over_closing_courtesies() -> None:
    kind = ChoiceAnswer(choices=("Paris", "London", "Berlin", "Madrid"))
    text = "(C) Berlin\n\nBerlin is the capital of Germany.\n\nI hope this helps! Let me know if you need more.</s>"
    assert kind.extract(text) == "C"
    assert ChoiceAnswer(choices=("\\pi", "2\\pi")).extract("so T = 2π") == "B"  # \pi and π are one option


def test_choice_with_options_reads_option_text_and_refuses_letters_beyond_them() -> None:
    kind = ChoiceAnswer(choices=("54", "0.36", "72"))
    assert kind.extract(r"so \boxed{0.36}") == "B"
    assert kind.extract("The answer is 72.") == "C"
    assert kind.extract("Answer: (D)") is None  # only three options
    places = ChoiceAnswer(choices=("mountains", "dead body", "state park"))
    assert places.extract("Answer: John lived in a state park.") == "C"  # the one option the answer names
    assert places.extract("Answer: not a state park.") is None  # ... unless it denies it
    assert places.extract("Answer: the mountains or a state park.") is None  # ... and only one
    assert kind.correct("B", "0.36") and kind.correct("(B) 0.36", "B") and not kind.correct("A", "B")
    assert ChoiceAnswer().bind({"choices": ["x", "y"]}).letters == "AB"


@given(st.sampled_from("ABCDEFGHIJ"), st.sampled_from([
    "The answer is ({})", "Answer: {}", r"\boxed{{{}}}", "**Answer: ({})**", "I'll go with {}.",
    "Option {} is correct.", "the correct option is **({})**", "Final Answer: The final answer is $\\boxed{{{}}}$",
]), st.text(alphabet="abcdefghijklmnopqrstuvwxyz .,\n", max_size=200))
def test_choice_finds_any_letter_stated_after_any_reasoning(letter: str, form: str, reasoning: str) -> None:
    """Property: reasoning without capital letters or cues, then a stated choice: the choice is read."""
    assert ChoiceAnswer().extract(reasoning + "\n" + form.format(letter)) == letter


@given(st.text(max_size=3000))
def test_choice_never_raises_and_answers_a_letter_or_none(text: str) -> None:
    found = ChoiceAnswer().extract(text)
    assert found is None or found in "ABCDEFGHIJ"


PIECES = st.sampled_from([
    "answer", "Answer: ", "the answer is ", "ANSWER", "answers", "<answer>", "(answer)", "(X) ", "also", "so ",
    "So, ", "therefore ", "Thus", "hence", "it's ", "It is ", "with", "i ", "I'll ", "we'd ", "We ", "choose ", "pick",
    "option ", "Choice ", "= ", "=option ", "which is ", "correct", "incorrect ", "right", "best", "final", "closest",
    "most ", "only ", "response: ", "答案是", "选", "是", "选项", "回答", "答え", "正解", "正しい", "適切", "정답은",
    "(", ")", "[", "]", "（", "）", "【", "】", "A", "B", "(C)", "[D]", "e", " ", "  ", "\n", ".", ". ", "! ", "? ",
    "。", "_", "x", "9", "'", "not ", "n't ", "no ", "wrong", "false", "eliminated", "rules out", "except", "不",
    "错误", "非", "e.g. ", "for example ", "format ", "例如", "İ", "K", "ſ", "\t", "\u00a0", "making ", "Leaves ",
    "make", "the incorrect statement is ", "I’ll ", "’", "is ", "this ", "be ", "B) ", "C) 45 ", "Production ",
    " is the correct answer", " would be the best option", "option ", "is B) Production", "be (C) A",
])
"""Fragments of text where the choice kind's shortcuts could matter: cue words inside and outside words, brackets,
sentence ends, denials, echoed examples, other scripts and characters whose case changes length."""


def _plain_by_definition(text: str) -> str:
    """What ``_plain`` gives, every text tried as a number."""
    from scaffold._answers import as_number
    from scaffold.answers._choice import _PUNCTUATION, _clean

    clean = _clean(text).strip().rstrip(".").replace("\\pi", "π").replace("−", "-")
    value = as_number(clean.replace("$", "").replace(" ", ""))
    return f"#{value}" if value is not None else _PUNCTUATION.sub("", clean.lower())


def _cues_by_every_word(clean: str, low: str) -> list[tuple[int, int]]:
    """The definition the fast search of cues keeps: the cue regex tried wherever any cue word starts."""
    from scaffold.answers._choice import _CUE, _CUE_WORDS

    if len(low) != len(clean):
        return [m.span() for m in _CUE.finditer(clean)]
    starts = sorted({at for word in _CUE_WORDS for at in range(len(low)) if low.startswith(word, at)})
    out, end = [], -1
    for at in starts:
        m = _CUE.match(clean, at) if at >= end else None
        if m is not None:
            out.append(m.span())
            end = m.end()
    return out


@settings(max_examples=600, deadline=None)
@example("So it's (B).")
@example("Done.. Next. . Then!\u3000Last?  ")
@example(" $-1,234$ ")
@example("\\frac{3}{4}")
@example(".5.")
@example("Options:\n 2: Thymoma")
@example("3) Thymoma")
@example("_**_ *__* *$* `**` $**$ \\(A\\) **B**")
@example("Not (A); it isn't B, we can't rule out C. Nothing is wrong. Inc. Knot. All options are correct.")
@example("That is 4, which is option B.")
@example("I'll choose C, and we'd pick (D) = option E.")
@example("The answer is not (A), which is option B. 【答案】 选 C")
@example("It is this (B) Production is B) Production")
@example("So (C) 45 is the correct answer, not D) 30 would be the best option")
@example("Options:\n(A) red\n B: blue\nC. green\n\nD)  \nE) x")
@example("(A) red\n(B) blue\nSo B.")
@given(st.one_of(st.lists(PIECES, max_size=12).map("".join),
                 st.lists(PIECES.filter(str.isascii), max_size=12).map("".join)))
def test_the_choice_kinds_shortcuts_agree_with_their_definitions(text: str) -> None:
    """Property: the extractor's fast paths (cue words looked for only at word starts and only where their
    branch can match, denials and examples looked for by their words first, the last sentence found from the
    end, the markup cleaned without a translation where no wide mark is) give what their plain definitions
    give."""
    import re

    from scaffold.answers import _choice as c

    clean = c._clean(text).replace(c._BOX, " ")
    low = clean.lower()
    assert [m.span() for m in c._cues(clean, low)] == _cues_by_every_word(clean, low)
    given = c._GIVEN_NUMBER_FIRST.match(text) or c._GIVEN_NUMBER_AFTER.search(text)
    assert (given and given.span(1)) == ((m := c._GIVEN_NUMBER.search(text)) and m.span(1))
    assert c._sentences(text) == c._SENTENCES.split(text)
    assert c._plain(text) == _plain_by_definition(text)
    scan = c._scan(clean, low)  # the words looked for in the same pass, where the automaton ran
    starts = [at for word in c._FIRST_WORDS for at in range(len(low)) if low.startswith(word, at)]
    assert scan.first in (None, max(starts, default=-1))
    examples = c._EXAMPLE_WORDS[not low.isascii()]
    if scan.examples is not None:
        assert sorted(set(scan.examples)) == sorted({(at, at + len(word)) for word in examples
                                                      for at in range(len(low)) if low.startswith(word, at)})
    for start in range(0, len(low) + 1, 7):
        assert scan.example_between(low, start, start + 60) == c._contains(low[start: start + 60], examples)
    if len(low) == len(clean):  # the cue words found by one automaton, as by a substring search per word
        key = (c._script(low), "option" in low or "choice" in low, "(" in low or "[" in low, "'" in low)
        scanned = c._matches_at(c._CUE, clean, sorted(c._word_starts(low, c._STARTS[key])), c._CUE_AT)
        assert [m.span() for m in scanned] == _cues_by_every_word(clean, low)
    named = re.compile(r"\(?([A-J])\)" + c._NAMED_RIGHT_TAIL + r"|\b" + c._NAMED_AFTER_IS.pattern)
    stated = c._NAMED_RIGHT_HINT.search(clean) is not None
    assert c._named_right(clean, stated) == [(m.start(), m.group(1) or m.group(2)) for m in named.finditer(clean)]
    listed: dict[str, str] = {}
    for m in c._OPTION_LINE.finditer(text):  # every line that lists an option, as the regex of one line finds it
        if not c._VERDICT_LINE.match(m.group()):
            listed.setdefault(m.group(1), m.group(2).strip())
    letters = "".join(letter for letter in "ABCDEFGHIJ" if letter in listed)
    count = next((i for i, letter in enumerate(letters) if letter != "ABCDEFGHIJ"[i]), len(letters))
    assert c._listed_options(text) == (tuple(listed[x] for x in "ABCDEFGHIJ"[:count]) if count >= 2 else None)
    assert c._denies(text) == (c._DENIED.search(text) is not None)
    every_right = re.compile(r"\ball" + c._ALL_RIGHT.pattern.removeprefix(r"a(?<!\wa)ll"), re.IGNORECASE)
    assert [m.span() for m in c._ALL_RIGHT.finditer(text)] == [m.span() for m in every_right.finditer(text)]
    assert c._contains(low, c._EXAMPLE_WORDS[True]) == any(word in low for word in c._EXAMPLE_WORDS[True])
    if not low.isascii():
        assert c._contains(low, c._EXAMPLE_WORDS[True]) == c._contains(low, c._EXAMPLE_WORDS[not low.isascii()])
    line = text.strip()
    if line:
        pieces = [part for part in re.split(r"(?<=[.!?。])\s+(?=\S)", line) if part.strip()]
        assert c._last_sentence(line) == (pieces[-1] if pieces else line)
    assert c._clean(text) == c._clean(text.translate(str.maketrans(c._WIDE)))
    for marked in (text, text.replace("(", "**").replace(")", "_"), text.replace("A", "$").replace("B", "*")):
        assert c._strip_marks(marked) == c._MARKS.sub("", marked)  # the marks taken away as the regex takes them


def test_no_cue_word_begins_another() -> None:
    """The cue search sorts the automaton's finds by where they start and tries the regex once at each: that needs
    no two cue words to start at one place, so no cue word may begin another (as "ans" would begin "answer")."""
    from scaffold.answers._choice import _CUE_WORDS

    assert len(set(_CUE_WORDS)) == len(_CUE_WORDS)
    assert [(a, b) for a in _CUE_WORDS for b in _CUE_WORDS if a != b and b.startswith(a)] == []


def test_the_choice_kind_reads_the_same_without_its_word_matcher(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cue words are found by an Aho-Corasick automaton (``ahocorasick_rs``, a dependency); where it does not import,
    by a substring search per word: every text of the phrasing corpus reads the same either way."""
    from scaffold.answers import _choice as c

    assert c._cue_matcher((0, False, False, False)) is not None  # installed with the package: the fast path
    rows = corpus()
    fast = [choice_of(row).extract(row["text"]) for row in rows]
    monkeypatch.setattr(c, "_cue_matcher", lambda key: None)
    assert [choice_of(row).extract(row["text"]) for row in rows] == fast
    assert sum(r == row["label"] for r, row in zip(fast, rows)) > 0.9 * len(rows)  # the readings are the real ones


@pytest.mark.parametrize("text", [
    "Thus B.", "Hence (C)\n", "So, the answer is D.", "Therefore A.", "the final option: B", "best option is C",
    "only correct choice = D", "The correct answer is B", "The incorrect statement is B", "closest answer would be C",
    "the most likely answer is D", "making C the correct answer", "leaving D as the best option", "The option is B",
    "that is option C.", "x = option B", "which is option C", "response: B", "respuesta: C", "réponse: D",
    "Antwort: A", "ответ: B", "đáp án: C", "Seçenek: D", "cevap: B", '{"correct_answer_key": "c"}', "Jawaban: A",
    "उत्तर: B",
    "it's (B)", "I choose C", "I'll pick D", "we'd select B", "We go with A",
    "答案是B", "正确选项是C", "选项是D", "故选C", "正确的是B。", "我的回答是A", "答えは B", "正解: C", "正しいものは D",
    "適切なものは B", "정답은 C", "<answer>B</answer>", "(answer) C", "(X) B",
])
def test_each_way_a_cue_opens_is_found_where_its_words_start(text: str) -> None:
    """Every way a cue opens, found by the part of the cue regex kept for its words (``_CUE_AT``) just as the whole
    regex finds it: a way missing from a word's part, or given to the wrong word, fails here."""
    from scaffold.answers import _choice as c

    clean = c._clean(text).replace(c._BOX, " ")
    low = clean.lower()
    found = [m.span() for m in c._cues(clean, low)]
    assert found and found == _cues_by_every_word(clean, low)


@settings(max_examples=400, deadline=None)
@example("First Choice: B\nSecond Choice: D\n", "Answer: C", False)  # a ranked answer: its first choice
@example("The answer is (B), not", "\nAnswer: E", True)  # E is no option: an earlier cue decides
@given(st.lists(PIECES, max_size=12).map("".join),
       st.sampled_from(["\nAnswer: C", "\n**Final answer:** (B).", "\nanswer: D\n", " Answer: J",
                        "\n\nFINAL ANSWER: (E)", "\n  answer:**B**", "Answer: A"]),
       st.booleans())
def test_the_shortcut_for_a_last_line_that_only_answers_reads_as_the_whole_reading(prefix: str, final: str,
                                                                                   options: bool) -> None:
    """Property: a text whose last line only answers ("Answer: C") is read by a shortcut; it gives what the whole
    reading gives, whatever comes before that line."""
    kind = ChoiceAnswer(choices=("red", "blue", "green", "4")) if options else ChoiceAnswer()
    assert kind.extract(prefix + final) == kind._extract(prefix + final)


@given(st.lists(st.sampled_from(["\x00{", "{", "}", "a", "B", " "]), max_size=60).map("".join))
def test_many_boxes_are_matched_as_one_box_at_a_time_is(marked: str) -> None:
    """Property: the one-pass brace matching used for a text with many boxes finds what scanning each box to its
    closing brace finds."""
    from scaffold.answers import _choice as c

    assume(marked.count("\x00") <= 16)  # where _boxes scans each box itself
    assert c._many_boxes(marked) == c._boxes(marked)


def test_hostile_texts_are_read_in_time_linear_in_their_length() -> None:
    """Nested boxes, wrappers, a line of dots and endless cues: each read in one pass (each took minutes or
    seconds when a box, a wrapper or a sentence end was looked for again from the start)."""
    kind = ChoiceAnswer()
    assert kind.extract("\\boxed{" * 20_000 + "A" + "}" * 20_000) == "A"
    assert kind.extract("\\text{" * 5_000 + "the answer is (C)" + "}" * 5_000) == "C"
    assert kind.extract("." * 300_000) is None
    assert kind.extract("(A) " * 100_000) == "A"
    assert kind.extract("So the answer is (B). " * 20_000) == "B"


def test_a_loop_of_cues_naming_nothing_is_read_with_bounded_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """What follows a cue is read for at most the last ``_CUES_TRIED`` cues of a text, however many it has: a
    repetition loop of cues that name nothing ("答案是答案是...") would otherwise be read cue by cue. A choice
    stated after the loop, or inside its last cues, is still found."""
    kind = ChoiceAnswer(choices=("red", "blue", "green"))
    reads = 0
    after_cue = ChoiceAnswer._after_cue

    def counted(self: ChoiceAnswer, clean: str, at: int, made: bool = False) -> str | None:
        nonlocal reads
        reads += 1
        return after_cue(self, clean, at, made)

    from scaffold.answers import _choice as c

    monkeypatch.setattr(ChoiceAnswer, "_after_cue", counted)
    for loop in ("答案是" * 20_000, "정답: " * 20_000, "the answer is " * 20_000):
        reads = 0
        assert kind.extract(loop) is None
        assert 0 < reads <= 2 * c._CUES_TRIED  # the tail's window, then the whole text
        assert kind.extract(loop + " The answer is (B).") == "B"
    assert kind.extract("the answer is " * 100 + "blue") == "B"


def test_the_tail_of_a_long_text_decides() -> None:
    """A long text is read from its end first; a choice stated only early is still found."""
    musing = "Let me weigh option (A) against option (B) once more. " * 200
    assert ChoiceAnswer().extract(musing + "So the answer is (C).") == "C"
    assert ChoiceAnswer().extract("The answer is (D).\n" + musing) == "D"


@pytest.mark.parametrize(("text", "value"), [
    (r"so \boxed{033}", "33"), ("the total is 1,024 apples", "1024"), (r"\boxed{x = 12}", "12"),
    (r"\boxed{1\,024}", "1024"), ("it is 12.0", "12"), ("x = 2.5", None), (r"\boxed{-7}", "-7"), ("none", None),
])
def test_integer_reads_the_last_integer_the_answer_states(text: str, value: str | None) -> None:
    assert IntegerAnswer().extract(text) == value


def test_integer_equivalence_ignores_leading_zeros_and_separators() -> None:
    kind = IntegerAnswer()
    assert kind.same("007", "7") and kind.correct("1,024", "1024") and not kind.same("12", "13")


@given(st.integers(min_value=-10**12, max_value=10**12))
def test_integer_round_trips_any_integer_with_separators(n: int) -> None:
    assert IntegerAnswer().extract(rf"so \boxed{{{n:,}}}") == str(n)


def test_math_is_the_default_and_today_behaviour() -> None:
    kind = answer_kind()
    assert isinstance(kind, MathAnswer) and kind.name == "math"
    assert kind.extract(r"\boxed{\frac{1}{2}}") == sf.extract_boxed(r"\boxed{\frac{1}{2}}")
    assert kind.same("1/2", "0.5") and not kind.same("1/2", "0.4")


def test_text_normalises_case_punctuation_articles_and_spaces() -> None:
    kind = TextAnswer()
    assert normalise_text("  The  Eiffel Tower! ") == "eiffel tower"
    assert kind.same("the eiffel tower", "Eiffel Tower.") and not kind.same("Eiffel Tower", "Tower of London")
    assert kind.extract("I think...\nFinal answer: **Paris**") == "Paris"
    assert kind.extract(r"It is \boxed{\text{Paris}}") == r"\text{Paris}" and kind.same(r"\text{Paris}", "paris")
    assert kind.extract("  Paris, of course. ") == "Paris, of course."


class Capital(BaseModel):
    country: str
    city: str
    population: int | None = None


def test_json_validates_against_the_schema_and_takes_a_field() -> None:
    kind = JsonAnswer(Capital, field="city")
    assert kind.extract('Here:\n```json\n{"country": "France", "city": "Paris"}\n```') == "Paris"
    assert kind.extract('{"country": "France", "city": "Paris", "population": "many"}') is None  # not an int
    value, error = kind.parse("no json here")
    assert value is None and error == "no JSON object found"
    assert kind.same("Paris", "paris")
    whole = JsonAnswer(Capital)
    assert whole.extract('{"city": "Paris", "country": "France"}') == '{"city":"Paris","country":"France",' \
                                                                      '"population":null}'
    assert whole.response_format()["json_schema"]["schema"]["required"] == ["country", "city"]
    assert JsonAnswer().response_format() == {"type": "json_object"}


def test_bad_kinds_and_options_are_typed_errors() -> None:
    with pytest.raises(sf.AnswerKindError, match="unknown answer kind 'choise'; choose one of choice"):
        answer_kind("choise")
    with pytest.raises(sf.AnswerKindError, match="does not take these options"):
        answer_kind("integer", letters="AB")
    with pytest.raises(sf.AnswerKindError, match="has no field 'capital'"):
        JsonAnswer(Capital, field="capital")
    with pytest.raises(sf.AnswerKindError, match="pydantic model class"):
        JsonAnswer(dict)  # type: ignore[arg-type]
    with pytest.raises(sf.AnswerKindError, match="numbered is True or False"):
        answer_kind("choice", numbered="yes")
    with pytest.raises(sf.AnswerKindError, match="distinct capital letters"):
        ChoiceAnswer(letters="abc")
    with pytest.raises(sf.AnswerKindError, match="distinct capital letters"):
        ChoiceAnswer(letters="AAB")
    assert ChoiceAnswer(letters="ABCDE").extract("Answer: F") is None and ChoiceAnswer(letters="ABCDE").options() == {
        "letters": "ABCDE"}
    assert kind_names() == ["choice", "integer", "json", "math", "text"]


def _in_a_thread(fn: Any, limit: float) -> list[Any]:
    """``fn()``'s result, computed in a daemon thread given ``limit`` seconds (an empty list: it did not finish)."""
    import threading

    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    thread.start()
    thread.join(limit)
    return out


def test_math_equivalence_off_the_main_thread_is_right_and_survives_its_helper_dying() -> None:
    """Off the main thread (a served graph, a report read in a worker thread) math-verify runs in a helper
    process; its verdicts are the main thread's, and a helper that died is replaced."""
    from scaffold import _math_verify
    from scaffold._answers import equivalent

    pairs = [("\\sqrt{9}", "3"), ("y+2", "2+y"), ("\\frac{\\pi}{3}", "\\pi/3"), ("5", "z")]
    assert _in_a_thread(lambda: [equivalent(a, b) for a, b in pairs], 120) == [[True, True, True, False]]
    assert _math_verify._process is not None
    _math_verify._process.kill()
    _math_verify._process.wait()
    assert _in_a_thread(lambda: equivalent("3w", "w*3"), 120) == [True]


def test_a_hostile_answer_cannot_hold_a_thread_other_than_the_main_one() -> None:
    """A tower of 150 powers kept math-verify busy for good outside the main thread (its timeouts need signals);
    in the helper process its own timeouts apply, so the comparison ends, unequal."""
    from scaffold._answers import equivalent

    tower = "v^" * 150 + "2"
    assert _in_a_thread(lambda: equivalent(tower, "4"), 150) == [False]
