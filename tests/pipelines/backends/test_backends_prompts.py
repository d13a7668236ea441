"""Prompt files: sections, rendering, hashing, packaged defaults."""

from __future__ import annotations

import pytest

from ddai.pipelines.backends import prompts
from ddai.pipelines.backends.base import ROLES

TEXT = """# notes are not part of the prompt
[system]
Grade answers.
[user]
Q: {{ question }}
A: {{ answer }}
"""


def test_sections_and_render():
    t = prompts.parse(TEXT, "t")
    assert (t.system, t.user) == ("Grade answers.", "Q: {{ question }}\nA: {{ answer }}")
    r = t.render(question="why?", answer="because")
    assert (r.system, r.user) == ("Grade answers.", "Q: why?\nA: because")


def test_hash_covers_the_prompt_not_the_comments():
    a = prompts.parse(TEXT, "a")
    b = prompts.parse(TEXT.replace("# notes", "# other notes"), "b")
    c = prompts.parse(TEXT.replace("Grade answers.", "Grade answers strictly."), "c")
    assert a.sha256 == b.sha256 != c.sha256


def test_missing_variable_names_what_the_template_may_use():
    with pytest.raises(ValueError, match="may only use: question"):
        prompts.parse(TEXT, "t").render(question="q")


def test_file_without_user_section_is_refused():
    with pytest.raises(ValueError, match=r"no \[user\] section"):
        prompts.parse("[system]\nhi\n")


@pytest.mark.parametrize("role", [r for r in ROLES if r not in ("search", "embedder")])
def test_packaged_default_prompt_for_each_model_role(role):
    t = prompts.load(role)
    assert t.user and len(t.sha256) == 64


def test_prompt_file_path(tmp_path):
    p = tmp_path / "j.txt"
    p.write_text(TEXT, encoding="utf-8")
    assert prompts.load("judge", p).sha256 == prompts.parse(TEXT).sha256
    with pytest.raises(FileNotFoundError, match="does not exist"):
        prompts.load("judge", tmp_path / "missing.txt")


def test_default_judge_prompt_grades_on_ddais_rubric():
    """DDAI's judge (verl/workers/reward_manager/rm_phase2.py, LLM_JUDGE_PROMPT) scores semantic
    equivalence with partial credit: 1.0 equivalent, 0.5-0.9 partly correct, 0.0 wrong; a default
    that grades 0/1 (partial credit for lists only) gives other rewards to the same answers."""
    r = prompts.load("judge").render(
        question="What was the revenue?", reference="$4.5B", answer="4.5 billion dollars"
    )
    text = f"{r.system}\n{r.user}"
    for needle in ("What was the revenue?", "$4.5B", "4.5 billion dollars"):
        assert needle in r.user
    assert "0.5" in text and "0.9" in text and "partially correct" in text.lower()
    assert "semantic" in text.lower() and "1.0" in text and "0.0" in text
    assert '"score"' in text
