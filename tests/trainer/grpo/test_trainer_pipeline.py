"""SFT then GRPO on the toy fixture task with a tiny model: weights change, the assistant-only
mask is right, and the GRPO run's rollout log reads back and answers the query views."""

from __future__ import annotations

import pytest
from conftest import SHARED
from support.backends import RandomJudge, toy_backends
from support.toy_world import make_world, run_fields

from ddai.trainer.episode.chat import normalize_messages
from ddai.trainer.episode.config import EpisodeConfig, RewardOverrides
from ddai.trainer.grpo.train import GRPORunConfig, run_grpo
from ddai.trainer.modeling import load_tokenizer
from ddai.trainer.sft.train import SFTRunConfig, load_conversations, run_sft


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp("pipe"))


def test_assistant_only_mask_on_ddai_train1(setup):
    """DDAI's real train1 rows: the masked-in tokens are exactly the assistant turns + <|im_end|>."""
    _, _, tiny = setup
    tok = load_tokenizer(str(tiny))
    convs, dropped, _ = load_conversations([SHARED / "ddai-data" / "val1.parquet"])
    assert dropped == {} and len(convs) == 26
    for msgs in convs[:5]:
        out = tok.apply_chat_template(
            msgs, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
        )
        ids, mask = out["input_ids"], out["assistant_masks"]
        spans, cur = [], []
        for i, m in zip(ids, mask, strict=True):
            if m:
                cur.append(i)
            elif cur:
                spans.append(cur)
                cur = []
        if cur:
            spans.append(cur)
        want = [m["content"] + "<|im_end|>" for m in msgs if m["role"] == "assistant"]
        assert [tok.decode(s) for s in spans] == want
    # DDAI's image observations become text the policy can read.
    assert any("[image: " in m["content"] for m in convs[0] if m["role"] == "user")
    assert normalize_messages('[{"role": "user", "content": [{"image": "a.jpg"}]}]') == [
        {"role": "user", "content": "[image: a.jpg]"}
    ]


@pytest.mark.slow
def test_sft_then_grpo_changes_weights_and_logs_rollouts(setup):
    root, data, tiny = setup
    sft = run_sft(
        SFTRunConfig(
            model=str(tiny),
            data=[data / "sft.parquet"],
            output_dir=root / "sft",
            max_steps=2,
            learning_rate=1e-3,
            batch_size=4,
            max_length=256,
            logging_steps=1,
            report_to="csv",
        )
    )
    assert sft.steps == 2 and sft.rows == 8 and sft.changed_parameters > 0
    assert (root / "sft" / "model.safetensors").is_file() and (
        root / "sft" / "metrics.csv"
    ).is_file()

    judge = RandomJudge()
    backends = toy_backends(judge)
    result = run_grpo(
        GRPORunConfig(
            **run_fields(root / "sft", data, root / "grpo", root / "logs", "grpo_test"),
            n_agent=2,
            batch_size=4,
            max_steps=2,
            learning_rate=1e-3,
            save_steps=2,
            episode=EpisodeConfig(
                max_turns=2, max_turn_tokens=16, max_completion_tokens=96, obs_max_tokens=16
            ),
            rewards=RewardOverrides(reward="judge-only"),
        ),
        backends,
    )
    assert result.steps == 2 and result.changed_parameters > 0
    # No gate: every rollout is judged: 8 trained on, plus the preflight's sample of 2 prompts
    # x n_agent 2, which is scored but neither trained on nor logged.
    assert result.rollouts_logged == 8 and judge.calls == 8 + 4
    assert result.preflight == "passed"
    import json

    run_config = json.loads((root / "grpo" / "run_config.json").read_text("utf-8"))
    assert run_config["skip_preflight"] is False and run_config["config"]["n_agent"] == 2
    assert run_config["preflight"]["checks"]["episodes"]["episodes"] == 4
    assert run_config["preflight"]["checks"]["golden pages"]["missing_pages"] == 0
    assert (root / "grpo" / "checkpoint-2").is_dir()

    from ddai.pipelines.store import read_rollouts
    from ddai.pipelines.store.query import connect

    table = read_rollouts(root / "logs", runs=["grpo_test"])
    rows = table.to_pylist()
    assert len(rows) == 8 and {r["step"] for r in rows} == {1, 2}
    assert all(r["advantage"] is not None and r["reward"] == r["judge_score"] for r in rows)
    assert all(r["reward_parts"] is not None and r["turns"] for r in rows)
    assert {r["rollout_idx"] for r in rows} == {0, 1}
    # The logged advantage is TRL's, as ``grpo.advantage`` names it: each group (a step's
    # contiguous block of n_agent slots) through ``group_advantages``.
    from ddai.trainer.grpo.advantage import group_advantages

    groups: dict[tuple, list[dict]] = {}
    for r in sorted(rows, key=lambda r: (r["step"], r["sample_idx"])):
        groups.setdefault((r["step"], r["sample_idx"] // 2), []).append(r)
    assert len(groups) == 4 and all(len({r["uid"] for r in g}) == 1 for g in groups.values())
    for g in groups.values():
        want = group_advantages([r["reward"] for r in g])
        assert [r["advantage"] for r in g] == pytest.approx(want, rel=1e-5, abs=1e-6)
    assert sum(abs(r["advantage"]) > 0.1 for r in rows) >= 4  # random judge: mixed groups
    con = connect(root / "logs", runs=["grpo_test"])
    (n_prompts, n_rollouts) = con.execute("select count(*), sum(n) from prompts").fetchone()
    assert n_rollouts == 8 and n_prompts >= 2
    # The run's log is an ordinary rollout log: it re-ingests (native Parquet) and reports.
    from ddai.pipelines.ingest import IngestConfig, ingest
    from ddai.pipelines.store import parquet_files
    from ddai.reports import build_report
    from ddai.reports.config import ReportConfig

    res = ingest(
        IngestConfig(parquet_files(root / "logs", ["grpo_test"]), root / "logs2", progress=False)
    )
    assert res.rollouts_out == 8 and sum(res.quarantined.values()) == 0
    rep = build_report(ReportConfig(logs=root / "logs2", out=root / "grpo.html", progress=False))
    html = (root / "grpo.html").read_text(encoding="utf-8")
    assert rep["rollouts"] == 8 and rep["runs"] == ["grpo_test"] and rep["browser rows"] == 8
    assert "grpo_test" in html


def test_grpo_logs_its_rollouts_and_metrics_to_object_storage(setup, s3_env):
    root, data, tiny = setup
    from ddai.pipelines.store import read_rollouts, run_manifest
    from ddai.pipelines.store.side_log import read_rows

    logs = f"{s3_env}/logs"
    backends = toy_backends()
    result = run_grpo(
        GRPORunConfig(
            model=str(tiny), data=data / "dataset.parquet", corpus=data / "pages.parquet",
            output_dir=root / "grpo_s3", logs=logs, run_id="g", n_agent=2,
            batch_size=4, max_steps=2, learning_rate=1e-3, skip_preflight=True, logging_steps=1,
            episode=EpisodeConfig(
                max_turns=2, max_turn_tokens=16, max_completion_tokens=96, obs_max_tokens=16
            ),
            rewards=RewardOverrides(reward="judge-only"),
        ),
        backends,
    )  # fmt: skip
    assert result.steps == 2 and result.rollouts_logged == 8 and result.logs == logs
    assert {r["step"] for r in read_rollouts(logs, ["g"]).to_pylist()} == {1, 2}
    assert len(run_manifest(logs, "g")["files"]) == 2  # one append per step
    metrics = read_rows(logs, "train_metrics", "g")  # one part object per logged step
    assert [m["step"] for m in metrics] == [1, 2]
    assert len(run_manifest(logs, "g")["side_tables"]["train_metrics"]["parts"]) == 2
    assert not (root / "s3:").exists()  # nothing written to a local folder named after the URL
