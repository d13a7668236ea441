"""The Searcher episode layer: search environment, multi-turn rollouts, rewards, page images,
chat template, prompt rows, rollout-log rows and samplers, shared by GRPO, PPO, value and collect."""
