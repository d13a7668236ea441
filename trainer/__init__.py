"""The TRL-based trainer: SFT and multi-turn GRPO for the Searcher, plus pure loss math.

Modules: ``advantages`` and ``losses`` (pure tensor functions, registered by name), ``env`` (the
search environment), ``rollout`` (lock-step multi-turn rollouts with state masking), ``rewards``
(reward formula, presets, streaming scorer), ``grpo`` and ``sft`` (``ddai train``), ``tiny``
(local tiny models), ``toy`` (a tiny search task), ``pointer`` (the pointer selector).
"""
