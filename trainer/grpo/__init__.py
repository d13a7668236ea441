"""Multi-turn GRPO for the Searcher on TRL's GRPOTrainer (``ddai train grpo``)."""
