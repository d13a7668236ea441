"""Supervised fine-tuning of the Searcher, text and vision-language (``ddai train sft``)."""
