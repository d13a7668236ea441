"""Tiny causal LMs for tests, benches and the demo: built locally, nothing downloaded.

``build_tiny(out)`` trains a byte-level BPE tokenizer with ``tokenizers`` on fixture text (ChatML
special tokens, the Searcher's tags as single tokens, a ChatML chat template with generation
markers) and saves a randomly initialised Qwen2-architecture model beside it. The result loads
through the same ``from_pretrained`` path as a real checkpoint (``ddai.trainer.modeling``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from ddai.pipelines.store import io
from ddai.trainer.episode.chat import CHATML_TEMPLATE, ENDOFTEXT, IM_END, IM_START

# The Searcher's tags become single tokens, so even a tiny model can learn the format quickly.
TAG_TOKENS = (
    "<think>",
    "</think>",
    "<search>",
    "</search>",
    "<bbox>",
    "</bbox>",
    "<search_complete>",
    "</search_complete>",
)
SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END)

# Built-in fixture text: enough ChatML, tags and prose for the BPE merges to be meaningful.
FIXTURE_TEXT = """\
<|im_start|>system
You are a search agent. Begin with <think>...</think>, then exactly one action.<|im_end|>
<|im_start|>user
Which year had the highest revenue in the annual report?<|im_end|>
<|im_start|>assistant
<think>I need the revenue chart of the annual report.</think>
<search>annual report revenue by year chart</search><|im_end|>
<|im_start|>user
[page 12_3] Revenue grew from 2019 to 2021; the highest revenue was in 2021.<|im_end|>
<|im_start|>assistant
<think>I will crop the chart to read the bars.</think>
<bbox>[10, 20, 300, 400]</bbox><|im_end|>
<|im_start|>assistant
<think>The page answers the question.</think>
<search_complete>true</search_complete><|im_end|>
<think>Maximum turn limit reached. Trigger search_complete.</think><search_complete>true</search_complete>
The quick brown fox jumps over the lazy dog. Slides, charts, tables, pages, documents, figures,
percent, share, survey, market, growth, population, country, company, sales, users, year, month.
0 1 2 3 4 5 6 7 8 9 10 12 15 20 25 30 50 75 100 2018 2019 2020 2021 2022 2023 %
"""


@dataclass(frozen=True)
class TinySpec:
    """Size of the tiny model; the defaults give about 0.1 M parameters."""

    vocab_size: int = 512
    hidden_size: int = 64
    intermediate_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 4096
    seed: int = 0

    def __post_init__(self) -> None:
        if self.num_attention_heads < 1 or self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"--heads {self.num_attention_heads} must divide --hidden-size {self.hidden_size}"
            )


@dataclass(frozen=True)
class TinyBuildConfig:
    """What ``ddai model tiny`` builds: its size settings make a ``TinySpec`` (``spec``) whose
    feed-forward width is twice the hidden width and whose key/value heads are half the heads."""

    out: Path
    """Folder to write the model and tokenizer to."""
    text: list[Path] | None = None
    """Extra text, JSONL or Parquet file(s) to train the tokenizer on (repeatable); Parquet/JSONL
    string columns are used. Default: built-in fixture text only."""
    hidden_size: int = TinySpec.hidden_size
    """Hidden width."""
    layers: int = TinySpec.num_hidden_layers
    """Number of transformer layers."""
    heads: int = TinySpec.num_attention_heads
    """Attention heads (must divide the hidden size)."""
    vocab_size: int = TinySpec.vocab_size
    """BPE vocabulary size before added tokens."""
    seed: int = TinySpec.seed
    """Seed of the random initialisation."""
    overwrite: bool = False
    """Replace a non-empty OUT folder."""

    def spec(self) -> TinySpec:
        """The model's size (raises ``ValueError`` when ``heads`` does not divide the width)."""
        return TinySpec(
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            intermediate_size=2 * self.hidden_size,
            num_hidden_layers=self.layers,
            num_attention_heads=self.heads,
            num_key_value_heads=max(1, self.heads // 2),
            seed=self.seed,
        )


def train_tokenizer(texts: Iterable[str], vocab_size: int = 512):
    """A byte-level BPE ``PreTrainedTokenizerFast`` trained on ``texts``; encodes any UTF-8 text.

    Special tokens: ``<|endoftext|>`` (pad), ``<|im_start|>``, ``<|im_end|>`` (eos); the Searcher's
    tags are added as ordinary single tokens (kept when decoding with ``skip_special_tokens``).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        clean_up_tokenization_spaces=False,
    )
    fast.add_special_tokens({"additional_special_tokens": [IM_START]})
    fast.add_tokens(list(TAG_TOKENS))
    fast.chat_template = CHATML_TEMPLATE
    return fast


def build_tiny(
    out: str | os.PathLike[str],
    *,
    texts: Iterable[str] | None = None,
    spec: TinySpec | None = None,
    overwrite: bool = False,
) -> Path:
    """Write a tiny Qwen2 model and its tokenizer to ``out`` (a ``from_pretrained`` folder).

    The folder is built beside ``out`` and renamed into place, so a crash leaves no half model.
    An existing non-empty ``out`` is an error unless ``overwrite``.
    """
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    spec = spec or TinySpec()
    corpus = [FIXTURE_TEXT, *(texts or [])]
    tokenizer = train_tokenizer(corpus, spec.vocab_size)
    torch.manual_seed(spec.seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        do_sample=True,
    )
    path = Path(out)
    if path.exists() and any(path.iterdir()) and not overwrite:
        raise FileExistsError(
            f"{path} is not empty; pick a new folder or pass overwrite (--overwrite)"
        )
    with io.atomic_dir(path) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "ddai_tiny.json").write_text(json.dumps(asdict(spec), indent=2) + "\n", "utf-8")
    return path


def read_texts(paths: Iterable[str | os.PathLike[str]], max_chars: int = 2_000_000) -> list[str]:
    """Tokenizer training text from files: plain text, or every string cell of JSONL / Parquet.

    Stops after ``max_chars`` characters in all (a tokenizer for a tiny model needs little).
    """
    import pyarrow.parquet as pq

    paths = [Path(p) for p in paths]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"--text file(s) not found: {', '.join(missing)}")
    out: list[str] = []
    total = 0
    for p in paths:
        if p.suffix == ".parquet":
            rows = pq.read_table(p).to_pylist()
        elif p.suffix == ".jsonl":
            rows = [json.loads(line) for line in p.read_text("utf-8").splitlines() if line.strip()]
        else:
            rows = [{"text": p.read_text("utf-8")}]
        for row in rows:
            for s in _strings(row):
                out.append(s)
                total += len(s)
                if total >= max_chars:
                    return out
    return out


def _strings(value: object) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _strings(v)
