"""``records.defaults.changed``: the settings a user set away from their defaults."""

from __future__ import annotations

from dataclasses import dataclass, field

from ddai.pipelines.records.defaults import changed


@dataclass
class _Cfg:
    path: str
    k: int = 4
    mode: str = "sft"
    flag: bool = True
    tags: list[str] = field(default_factory=list)


def test_changed_names_the_fields_away_from_their_defaults_in_field_order():
    cfg = _Cfg("p", mode="rce", k=4, flag=False, tags=["x"])
    # required fields and default factories have no plain default: never reported
    assert changed(cfg) == ["mode", "flag"]
    assert changed(cfg, ["flag", "k"]) == ["flag"]
    assert changed(_Cfg("p")) == []
    assert changed(_Cfg("p", k=5), ("k",)) == ["k"]
