"""Page images drawn from a text corpus: each line's text in its box on a white page (PIL).

The synthetic world's corpus is text with a pixel box per line; drawing it gives images whose
coordinates match the ``<bbox>`` actions in its rollouts, so an image viewer (``ddai serve
--image-root``) can show pages and crops for a world that has no scans.
"""

from __future__ import annotations

from ddai.pipelines.pages.corpus import Page


def draw_page(page: Page) -> bytes:
    """``page`` as PNG bytes (``width`` × ``height`` pixels): a title bar, each line in its box."""
    import io as _io

    from PIL import Image, ImageDraw, ImageFont

    im = Image.new("RGB", (page.width, page.height), "white")
    draw = ImageDraw.Draw(im)
    draw.rectangle((0, 0, page.width - 1, page.height - 1), outline=(160, 160, 160), width=2)
    for i, line in enumerate(page.lines):
        x1, y1, x2, y2 = line.bbox
        size = max(10, min(48, int((y2 - y1) * 0.7)))
        font = ImageFont.load_default(size=size)
        if i == 0:  # the slide title on a tinted band, so pages are told apart at a glance
            draw.rectangle((x1, y1, x2, y2), fill=(225, 235, 250))
        draw.text((x1 + 4, y1 + (y2 - y1 - size) / 2), line.text, fill="black", font=font)
    draw.text(
        (8, page.height - 24),
        page.page_id,
        fill=(120, 120, 120),
        font=ImageFont.load_default(size=16),
    )
    buf = _io.BytesIO()
    im.save(buf, format="PNG", optimize=False)
    return buf.getvalue()
