"""The worked DDAI setup of docs/training.md against a service answering as DDAI's does.

DDAI's search API answers each query with its top 10 pages (``search_engine/search_engine.py``,
``batch_search``: ``torch.topk(scores, k=min(self.image_nums, 10))``) and DDAI's loop shows the
first of *all* of them not yet seen in the rollout (``vrag_agent/generation.py``,
``_process_next_obs``). A client that keeps fewer shows a page again where DDAI shows a new one,
so the rollout's retrieved pages, and its NDCG, differ from DDAI's.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from support.fakes_search import FakeSearchServer, hash_ranker

from ddai.pipelines.backends import get_backend
from ddai.trainer import toy
from ddai.trainer.episode.env import EnvConfig, SearchEnv

DOC = Path(__file__).resolve().parents[3] / "docs" / "training.md"
PAGES = toy.corpus().pages()


def _worked_setup_config() -> dict:
    text = DOC.read_text(encoding="utf-8")
    after = text.split("**A worked DDAI-style setup**", 1)[1]
    block = re.search(r"```toml\n(.*?)```", after, flags=re.DOTALL)
    assert block, "docs/training.md: the worked DDAI setup has no toml block"
    return tomllib.loads(block.group(1))


def test_the_worked_ddai_setup_shows_a_new_page_per_search_as_ddai_does():
    table = dict(_worked_setup_config()["backends"]["ddai_search"])
    with FakeSearchServer(pages=PAGES, top_k=10) as srv:
        table.update(url=srv.ddai_url, timeout_s=2, backoff_base_s=0.01)
        search = get_backend("search", "svc", config={"backends": {"svc": table}})
        env = SearchEnv(search, toy.corpus(), EnvConfig(max_turns=7))
        ep = env.reset("question")
        for _ in range(env.config.policy_turns):  # six searches of one query
            env.step(ep, "<think>look</think>\n<search>revenue chart</search>")
        assert ep.done
        # DDAI's loop: six distinct pages, the service's ranks 1..6.
        assert ep.retrieved == hash_ranker(PAGES, 10)("revenue chart")[:6]
