"""The pointer selector (seed 002): model, decoding, losses, RL data generation, training and
evaluation. Its data formats and the synthetic VQA world live in ``ddai.pipelines.pointer``."""
