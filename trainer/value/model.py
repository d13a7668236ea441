"""Value heads on a causal LM trunk (seed 004): linear or MLP head, top-N trunk layers trainable,
checkpoints that record the head type.

- ``linear``: ``hidden → 1`` (seed 004's choice: fewer parameters, easier to read);
- ``mlp``: ``hidden → 512 → 256 → 1`` with GELU and dropout (the DIAL-style bottleneck it replaces).

``unfreeze``: with 0 the trunk runs without autograd and the head trains on detached hidden states
(no trunk gradient at all); with N > 0 exactly the top N transformer layers (and the head) train,
every other trunk parameter is frozen. ``param_groups`` gives trunk and head their own learning
rates.

Seed 004 says two things of ``num_unfrozen_layers: 2``: its intent is "the top 2 layers
(``layers[-2:]``) get gradients", its code only chooses whether the value head reads
``hidden_states`` or ``hidden_states.detach()`` (every trunk layer then gets the value loss's
gradient, because the joint stage trains the whole trunk anyway). ``ddai train value`` follows the
intent (exactly the top N layers train); ``ddai train value-sft`` follows the code
(``--value-trunk-grad/--value-head-only``, the detach toggle on a trunk the CE trains whole).

A checkpoint folder holds ``value_config.json`` (head type, sizes, unfreeze, where the trunk is),
``value_head.safetensors``, the tokenizer, and ``trunk/`` when the trunk was trained (an untouched
trunk is referenced by its source path or hub id instead of being copied; a source folder above the
checkpoint, as value-sft's policy above its ``critic/``, as ``..`` parts so both move together).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ddai.pipelines.store import io
from ddai.trainer.vlm_inputs import forward_inputs

HEAD_TYPES = ("linear", "mlp")
CONFIG_FILE = "value_config.json"
HEAD_FILE = "value_head.safetensors"
TRUNK_DIR = "trunk"
# Attribute paths where decoder-only models keep their block list (Llama/Qwen/Mistral, GPT-2,
# GPT-NeoX, OPT-style decoders), and a VLM's language model (Qwen2-VL's ``language_model``).
_LAYER_PATHS = ("layers", "h", "blocks", "decoder.layers", "model.layers", "language_model.layers")


class LinearValueHead(nn.Module):
    """``[..., hidden] → [...]``: one linear map to a scalar."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.proj = nn.Linear(hidden_size, 1)

    def forward(self, hidden: Tensor) -> Tensor:
        return self.proj(hidden).squeeze(-1)


class MLPValueHead(nn.Module):
    """``[..., hidden] → [...]``: ``hidden → 512 → 256 → 1`` with GELU and dropout."""

    def __init__(self, hidden_size: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(hidden_size, 512),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(512, 256),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(256, 1),
        )

    def forward(self, hidden: Tensor) -> Tensor:
        return self.net(hidden).squeeze(-1)


def build_head(head_type: str, hidden_size: int, *, dropout: float = 0.1) -> nn.Module:
    """A fresh value head by name; an unknown name fails with the known ones."""
    if head_type == "linear":
        return LinearValueHead(hidden_size)
    if head_type == "mlp":
        return MLPValueHead(hidden_size, dropout)
    raise ValueError(f"unknown value head {head_type!r}; known: {', '.join(HEAD_TYPES)}")


def transformer_layers(trunk: nn.Module) -> nn.ModuleList:
    """The trunk's list of transformer blocks, bottom to top."""
    for path in _LAYER_PATHS:
        obj: Any = trunk
        for part in path.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                break
        if isinstance(obj, nn.ModuleList) and len(obj):
            return obj
    raise ValueError(
        f"cannot find the transformer layers of {type(trunk).__name__} (looked for "
        f"{', '.join(_LAYER_PATHS)}); use --unfreeze 0 with this model"
    )


@dataclass(frozen=True)
class ValueHeadConfig:
    """What a checkpoint records to rebuild its value model."""

    head_type: str
    hidden_size: int
    dropout: float
    unfreeze: int
    trunk: str
    """Where the trunk's weights are: ``trunk`` (inside the checkpoint), ``..`` parts (a folder
    above it), or a path / hub id."""


class ValueModel(nn.Module):
    """A value head on a transformer trunk (a ``transformers`` base model, e.g. ``Qwen2Model``)."""

    def __init__(
        self, trunk: nn.Module, head: nn.Module, *, head_type: str, unfreeze: int, dropout: float
    ) -> None:
        super().__init__()
        self.trunk = trunk
        self.head = head
        self.head_type = head_type
        self.dropout = dropout
        self.unfreeze = 0
        self.set_unfreeze(unfreeze)

    @property
    def hidden_size(self) -> int:
        return int(self.trunk.config.get_text_config().hidden_size)  # a VLM's: its text model's

    def set_unfreeze(self, n: int) -> None:
        """Make exactly the top ``n`` transformer layers trainable (0: none); the head always is."""
        layers = transformer_layers(self.trunk)
        if not 0 <= n <= len(layers):
            raise ValueError(
                f"--unfreeze {n}: the trunk has {len(layers)} layers; pick 0..{len(layers)}"
            )
        self.trunk.requires_grad_(False)
        for layer in list(layers)[len(layers) - n :] if n else []:
            layer.requires_grad_(True)
        self.head.requires_grad_(True)
        self.unfreeze = n

    def hidden_states(
        self, input_ids: Tensor, attention_mask: Tensor, images: dict[str, Any] | None = None
    ) -> Tensor:
        """Last hidden states ``[B,T,H]``; detached (computed without autograd) when unfreeze is 0.
        ``images``: the rows' page images (``vlm_inputs``) for a VLM trunk, which also gets its
        3-D M-RoPE positions; a text trunk gets positions over real tokens."""
        kwargs = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "use_cache": False,
            **forward_inputs(self.trunk, input_ids, attention_mask, images),
        }
        if self.unfreeze == 0:
            with torch.no_grad():
                return self.trunk(**kwargs).last_hidden_state.detach()
        return self.trunk(**kwargs).last_hidden_state

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor, images: dict[str, Any] | None = None
    ) -> Tensor:
        """``[B,T]``: the value of the prefix ending at each position (head in float32)."""
        hidden = self.hidden_states(input_ids, attention_mask, images)
        return self.head(hidden.float())

    def completion_values(
        self,
        input_ids: Tensor,
        attention_mask: Tensor,
        prompt_len: int,
        images: dict[str, Any] | None = None,
    ) -> Tensor:
        """Values aligned to completion tokens: ``[B, T − prompt_len]``; column ``t`` is the value
        of the state before completion token ``t`` (read at the position preceding it, like the
        policy's logits). Rows have left-padded prompts of common width ``prompt_len``."""
        return self(input_ids, attention_mask, images)[:, prompt_len - 1 : -1]

    def param_groups(self, *, trunk_lr: float, head_lr: float) -> list[dict[str, Any]]:
        """Optimizer groups: the trainable trunk parameters at ``trunk_lr``, the head at ``head_lr``."""
        groups = [{"params": list(self.head.parameters()), "lr": head_lr, "name": "head"}]
        trunk = [p for p in self.trunk.parameters() if p.requires_grad]
        if trunk:
            groups.append({"params": trunk, "lr": trunk_lr, "name": "trunk"})
        return groups

    def config(self, trunk: str) -> ValueHeadConfig:
        return ValueHeadConfig(self.head_type, self.hidden_size, self.dropout, self.unfreeze, trunk)


def _load_trunk(name_or_path: str, dtype: str) -> nn.Module:
    from transformers import AutoModel

    from ddai.trainer.modeling import DTYPES, found_model

    if dtype not in DTYPES:
        raise ValueError(f"--dtype {dtype!r}: use one of {', '.join(DTYPES)}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch_dtype = "auto" if dtype == "auto" else getattr(torch, dtype)
    with found_model(name_or_path):
        return AutoModel.from_pretrained(name_or_path, dtype=torch_dtype)


def new_value_model(
    name_or_path: str,
    *,
    head_type: str = "linear",
    unfreeze: int = 2,
    dropout: float = 0.1,
    dtype: str = "float32",
    seed: int = 0,
) -> tuple[ValueModel, Any]:
    """``(ValueModel, tokenizer)``: a fresh head on the trunk of a causal LM folder or hub id."""
    from ddai.trainer.modeling import load_tokenizer

    if head_type not in HEAD_TYPES:
        raise ValueError(f"unknown value head {head_type!r}; known: {', '.join(HEAD_TYPES)}")
    trunk = _load_trunk(name_or_path, dtype)
    torch.manual_seed(seed)
    head = build_head(head_type, int(trunk.config.get_text_config().hidden_size), dropout=dropout)
    model = ValueModel(trunk, head, head_type=head_type, unfreeze=unfreeze, dropout=dropout)
    return model, load_tokenizer(name_or_path)


def is_value_checkpoint(path: str | os.PathLike[str]) -> bool:
    return (Path(path) / CONFIG_FILE).is_file()


def save_value_model(
    model: ValueModel, tokenizer: Any, out: str | os.PathLike[str], *, source: str
) -> Path:
    """Write a checkpoint to ``out``; ``source`` is where the (untrained) trunk came from.

    The trunk is copied into ``out/trunk`` only when some of its layers trained (or ``source``
    is itself a checkpoint whose trunk lives inside it). Each file is written atomically and
    ``value_config.json`` last, so a folder with a config is a complete checkpoint.
    """
    from safetensors.torch import save_file

    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    src_cfg = read_config(source) if is_value_checkpoint(source) else None
    trunk_inside = model.unfreeze > 0 or (src_cfg is not None and src_cfg.trunk == TRUNK_DIR)
    if trunk_inside:
        tmp = Path(tempfile.mkdtemp(prefix=".trunk.", dir=root))
        try:
            model.trunk.save_pretrained(tmp)
            if (root / TRUNK_DIR).exists():
                shutil.rmtree(root / TRUNK_DIR)
            os.replace(tmp, root / TRUNK_DIR)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp)
        trunk_ref = TRUNK_DIR
    else:
        trunk_ref = _trunk_ref(root, trunk_location(source, src_cfg) if src_cfg else source)
    with tempfile.TemporaryDirectory(prefix=".tok.", dir=root) as tmp:
        tokenizer.save_pretrained(tmp)
        for f in Path(tmp).iterdir():
            with io.atomic_path(root / f.name) as dst:
                os.replace(f, dst)
    state = {k: v.detach().float().contiguous().cpu() for k, v in model.head.state_dict().items()}
    with io.atomic_path(root / HEAD_FILE) as dst:
        save_file(state, str(dst), metadata={"head_type": model.head_type})
    io.write_json(root / CONFIG_FILE, asdict(model.config(trunk_ref)))
    return root


def _trunk_ref(root: Path, source: str) -> str:
    """How ``root``'s config names its trunk ``source``: a folder above ``root`` (value-sft's
    policy folder holding ``critic/``) as ``..`` parts, so the pair can move together; another
    local path made absolute (so the checkpoint works from any folder); hub ids as given."""
    p = Path(source)
    if not p.exists():
        return source
    p, here = p.resolve(), root.resolve()
    return os.path.relpath(p, here) if p in here.parents else str(p)


def trunk_location(path: str | os.PathLike[str], cfg: ValueHeadConfig) -> str:
    """Where checkpoint ``path``'s trunk is: its ``trunk/``, a folder above it (recorded as
    ``..`` parts), or the recorded path / hub id (older checkpoints: absolute paths)."""
    if cfg.trunk == TRUNK_DIR:
        return str(Path(path) / TRUNK_DIR)
    if set(Path(cfg.trunk).parts) == {".."}:
        return os.path.normpath(Path(path).resolve() / cfg.trunk)
    return cfg.trunk


def read_config(path: str | os.PathLike[str]) -> ValueHeadConfig:
    p = Path(path) / CONFIG_FILE
    if not p.is_file():
        raise FileNotFoundError(
            f"{path} is not a value checkpoint (no {CONFIG_FILE}); train one with `ddai train value`"
        )
    data = json.loads(p.read_text("utf-8"))
    return ValueHeadConfig(**data)


def load_value_model(
    path: str | os.PathLike[str], *, unfreeze: int | None = None, dtype: str = "float32"
) -> tuple[ValueModel, Any]:
    """``(ValueModel, tokenizer)`` from a checkpoint; the head type comes from the checkpoint.

    ``unfreeze`` overrides the recorded number of trainable trunk layers (e.g. to keep training a
    critic with a different setting).
    """
    from safetensors.torch import load_file

    from ddai.trainer.modeling import load_tokenizer

    root = Path(path)
    cfg = read_config(root)
    trunk_src = trunk_location(root, cfg)
    try:
        trunk = _load_trunk(trunk_src, dtype)
    except ValueError as e:
        if cfg.trunk == TRUNK_DIR or str(e).startswith("--dtype"):
            raise
        raise ValueError(  # a path the user never typed: say whose it is and the fix
            f"value checkpoint {path}: its trunk {trunk_src} (value_config.json trunk, not copied "
            "into the checkpoint) is not there; put that model back, or set trunk in "
            f"{CONFIG_FILE} to where it is now ({e})"
        ) from e
    head = build_head(cfg.head_type, cfg.hidden_size, dropout=cfg.dropout)
    head.load_state_dict(load_file(str(root / HEAD_FILE)))
    model = ValueModel(
        trunk,
        head,
        head_type=cfg.head_type,
        unfreeze=cfg.unfreeze if unfreeze is None else unfreeze,
        dropout=cfg.dropout,
    )
    return model, load_tokenizer(str(root))
