"""The trainer: SFT, multi-turn GRPO and PPO for the Searcher, the value head and the pointer
selector, each a room of the same shape (a config dataclass, a ``run_*`` entry, its math beside it).

Rooms: ``episode`` (the episode layer every trainer shares: environment, rollouts, rewards, tasks,
log rows), ``grpo``, ``ppo``, ``value``, ``sft``, ``pointer``; ``runtime`` (what every trainer
shares: processes, launch, memory, metrics, final saves). Shared modules: ``rlmath`` (the RL math
leaf), ``advantages`` and ``losses`` (pure tensor functions), ``trl_compat`` (the one fence around
TRL beyond its public top level), ``common`` and ``modeling`` (configs and model loading),
``tiny`` (a local tiny model), ``toy`` and ``learn_task`` (a tiny search task for ``ddai demo --train``, tests and benches). ARCHITECTURE.md at
the repository root maps them.
"""
