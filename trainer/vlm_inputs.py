"""A forward pass's position and image inputs for a text LM or a Qwen2-VL-family VLM, for the
trainers that run their own passes (PPO's log-prob, reference and value passes).

A text model gets positions counted over real tokens (left padding does not shift them). A VLM
(a model whose inner module has ``get_rope_index``) gets each row's images (``pixel_values`` and
``image_grid_thw``, in the ``vision_batch`` layout of ``episode.vision``), the image-token marks
(``mm_token_type_ids``) and the 3-D M-RoPE positions ``[3, B, L]`` that transformers' own
``get_rope_index`` computes from the ids, the marks and the grids: the same for a row whatever
other rows share its pass, since padding is skipped row by row. Rows without an image get plain
positions in all three axes, which is what the model gives a text-only sequence.

``select_images`` takes any rows of a batch's images: they are concatenated along the patch axis,
so each row's slice is found by its images' patch counts (``t·h·w`` per image).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate
from typing import Any


def unwrap(model: Any) -> Any:
    """The transformers model inside DDP's, peft's and ``AdapterDisabled``'s wrappers."""
    import torch

    from ddai.trainer.modeling import AdapterDisabled

    inner = model.model if isinstance(model, AdapterDisabled) else model
    if isinstance(inner, torch.nn.parallel.DistributedDataParallel):
        inner = inner.module
    if hasattr(inner, "get_base_model"):  # peft
        inner = inner.get_base_model()
    return inner


def rope_model(model: Any) -> Any | None:
    """The module whose ``get_rope_index`` gives ``model``'s M-RoPE positions (a Qwen2-VL
    ``...ForConditionalGeneration``'s ``.model``, or a bare ``Qwen2VLModel``); None for a text LM."""
    inner = unwrap(model)
    for candidate in (inner, getattr(inner, "model", None)):
        if candidate is not None and callable(getattr(candidate, "get_rope_index", None)):
            return candidate
    return None


def text_positions(attention_mask: Any) -> Any:
    """Positions counted over real tokens only, so left padding does not shift them: ``[B,L]``."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def select_images(images: dict[str, Any] | None, rows: Sequence[int] | Any) -> dict | None:
    """Rows ``rows`` (any order, a list or a 1-D tensor) of a ``vision_batch``: their
    ``pixel_values`` ``[sum patches, D]``, ``image_grid_thw`` ``[n_images, 3]`` and
    ``num_images``, in the order of ``rows``; None when none of them shows an image."""
    import torch

    if images is None:
        return None
    rows = [int(r) for r in (rows.tolist() if hasattr(rows, "tolist") else rows)]
    num = images["num_images"]
    grid = images["image_grid_thw"]
    patches = grid.prod(-1).tolist()  # per image
    first_image = [0, *accumulate(num)]
    first_patch = [0, *accumulate(int(p) for p in patches)]
    picked = [r for r in rows if num[r]]
    if not picked:
        return None
    pixels, grids = [], []
    for r in picked:
        a, b = first_image[r], first_image[r + 1]
        pixels.append(images["pixel_values"][first_patch[a] : first_patch[b]])
        grids.append(grid[a:b])
    return {
        "pixel_values": torch.cat(pixels),
        "image_grid_thw": torch.cat(grids),
        "num_images": [num[r] for r in rows],
    }


def forward_inputs(
    model: Any, input_ids: Any, attention_mask: Any, images: dict[str, Any] | None
) -> dict[str, Any]:
    """The keyword inputs besides ``input_ids``/``attention_mask`` of one forward pass of
    ``model`` over ``input_ids`` ``[B,L]``: ``position_ids`` ``[B,L]`` for a text LM; for a VLM
    the rows' ``images`` (moved to the ids' device), ``mm_token_type_ids`` ``[B,L]`` and
    ``position_ids`` ``[3,B,L]`` from ``get_rope_index``. Images given to a text LM are refused:
    its pass would silently score the placeholder tokens without their pixels."""
    rope = rope_model(model)
    if rope is None:
        if images is not None:
            raise ValueError(
                f"{type(unwrap(model)).__name__} takes no images, but the rollouts showed "
                f"{sum(images['num_images'])}; use a VLM policy (--observation image)"
            )
        return {"position_ids": text_positions(attention_mask)}
    device = input_ids.device
    image_id = int(rope.config.image_token_id)
    marks = (input_ids == image_id).long()
    grid = None if images is None else images["image_grid_thw"].to(device)
    n_marked = int(marks.sum())
    n_expected = 0 if grid is None else int((grid.prod(-1) // _merge(rope) ** 2).sum())
    if n_marked != n_expected:
        raise ValueError(
            f"the rows hold {n_marked} image placeholder tokens but their images fill "
            f"{n_expected}: a row's pixel values were lost or belong to another row"
        )
    positions, _ = rope.get_rope_index(
        input_ids, mm_token_type_ids=marks, image_grid_thw=grid, attention_mask=attention_mask
    )
    out: dict[str, Any] = {"position_ids": positions, "mm_token_type_ids": marks}
    if images is not None:
        out["pixel_values"] = images["pixel_values"].to(device)
        out["image_grid_thw"] = grid
    return out


def _merge(rope: Any) -> int:
    """Patches merged per side into one placeholder token (Qwen2-VL: 2)."""
    return int(rope.config.vision_config.spatial_merge_size)
