"""PPO with a value-head critic for the Searcher (``ddai train ppo``, seed 003)."""
