"""``ddai.trainer.tiny`` refuses what ``ddai model tiny`` refuses, before building anything."""

from __future__ import annotations

import pytest

from ddai.trainer.tiny import TinySpec, build_tiny, read_texts


def test_heads_must_divide_the_hidden_size():
    assert TinySpec(hidden_size=64, num_attention_heads=8).num_attention_heads == 8
    with pytest.raises(ValueError, match="--heads 3 must divide --hidden-size 64"):
        TinySpec(hidden_size=64, num_attention_heads=3)


def test_missing_text_files_are_named_together(tmp_path):
    good = tmp_path / "a.txt"
    good.write_text("some text", encoding="utf-8")
    assert read_texts([good]) == ["some text"]
    with pytest.raises(FileNotFoundError, match=r"--text file\(s\) not found: .*b\.txt, .*c\.txt"):
        read_texts([good, tmp_path / "b.txt", tmp_path / "c.txt"])


def test_a_non_empty_folder_names_the_overwrite_flag(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "x").write_text("x", encoding="utf-8")
    with pytest.raises(FileExistsError, match="--overwrite"):
        build_tiny(tmp_path / "m")
