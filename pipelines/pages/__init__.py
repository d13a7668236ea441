"""Page corpora: a corpus's pages and texts (``corpus``), an image corpus built from page images
with its Arrow index (``image_corpus``), and a corpus's page images as the explorer serves them
(``page_images``). Import the modules by name; this package re-exports nothing."""
