"""Data for the pointer selector (seed 002): the synthetic VQA world and its deterministic
simulator, the embedding store, VQA prompts and scoring, generation records and statistics.

The model, decoding, losses and training live in ``ddai.trainer.pointer``.
"""
