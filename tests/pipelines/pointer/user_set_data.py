"""A small user-shaped VQA set on disk: PNG images and a .jsonl or .parquet file naming them."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
from PIL import Image

COLORS = ("red", "blue", "green", "white", "black", "yellow")


def make_user_set(folder: Path, n: int = 24, *, fmt: str = "jsonl", split: bool = False) -> Path:
    """``n`` rows: image ``images/NNN.png`` (a distinct colour pattern), a colour question and
    10 answers (8 right, 2 wrong); ``split`` adds a split column (every third row a demo)."""
    (folder / "images").mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        color = COLORS[i % len(COLORS)]
        img = Image.new("RGB", (8, 8), (i * 10 % 256, 255 - i * 7 % 256, i * 3 % 256))
        img.putpixel((i % 8, i // 8 % 8), (255, 255, 255))
        img.save(folder / "images" / f"{i:03d}.png")
        row = {
            "question_id": 1000 + i,
            "image": f"images/{i:03d}.png",
            "question": f"What color is object {i}?",
            "answers": [color] * 8 + ["gray", "brown"],
        }
        if split:
            row["split"] = "demo" if i % 3 == 0 else ("test" if i % 3 == 1 else "train")
        rows.append(row)
    path = folder / f"vqa.{fmt}"
    if fmt == "parquet":
        pl.DataFrame(rows).write_parquet(path)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
