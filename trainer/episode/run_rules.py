"""The rules that make a run's rollouts what they are, recorded with the run and checked when more
rollouts are added to it.

A run appended to (``ddai collect --append``, ``ddai eval --append``, ``train grpo/ppo
--append``) or continued (``train grpo/ppo --resume``) under other episode rules would hold
rollouts of two kinds under one run id, and its scores would mean two things at once (a crop
widened by 28 pixels or not, 4 turns or 7, another judge). ``episode_rules`` names those rules:
every episode setting (turns, forced completion, search k, token budgets, crop padding), the
observation kind and the images the generator is sent, the reward as applied (the preset with its
overrides), the search, generator and judge backends (what answers, not how fast: their kind,
model, prompt digest, temperature, token cap and options from ``ddai.toml``), the policy model and
its sampling. Each commit of ``RolloutLog`` writes them in its manifest record (``rules``),
training's ``run_config.json`` too; ``check_append`` and ``check_resume`` compare a new run's
rules with every recorded value and refuse a difference (``TrainConfigError``, exit 2) naming the
run, the setting, both values and the fix. A run recorded before a rule was (no value: an
ingested run, an older ddai) is accepted, and the rules it cannot check are returned as a note.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

from ddai.trainer.common import TrainConfigError

RULES_KEY = "rules"
"""The manifest record's (and ``run_config.json``'s) key of the rules."""

_BACKEND_FIELDS = ("kind", "model", "temperature", "max_tokens", "options")
"""What of a backend decides its answers; its concurrency, timeouts, prices and URL do not."""


def _backend(role: str, name: str | None) -> dict[str, Any]:
    """``role``'s backend as resolved from ``ddai.toml`` (``name`` None: the configured default):
    its name and what decides its answers (the prompt as a digest)."""
    from ddai.pipelines.backends.config import resolve

    spec = resolve(role, name)
    out: dict[str, Any] = {"name": spec.name}
    out.update({f: getattr(spec, f) for f in _BACKEND_FIELDS})
    if spec.prompt is not None:
        out["prompt_sha256"] = hashlib.sha256(spec.prompt.encode("utf-8")).hexdigest()[:16]
    return json.loads(json.dumps(out, default=str))  # JSON values, as read back from a manifest


def episode_rules(cfg: Any, sampling: dict[str, Any] | None = None) -> dict[str, Any]:
    """The rules of ``cfg``'s rollouts (a ``CollectConfig``, ``EvalConfig``, ``GRPORunConfig`` or
    ``PPORunConfig``), flat and JSON: ``sampling`` gives the policy's sampling as it is applied
    (GRPO's, resolved through TRL's config), else the config's own ``temperature``, ``top_p`` and
    ``top_k``. Backends that cannot be resolved are left out (the run refuses them later)."""
    from ddai.pipelines.backends.config import ConfigError

    spec = cfg.rewards.reward_spec()
    rules: dict[str, Any] = dict(dataclasses.asdict(cfg.episode))
    rules.update(dataclasses.asdict(spec))
    rules["observation"] = cfg.observation
    rules["generator_max_images"] = cfg.generator_max_images
    rules["model"] = str(cfg.model)
    rules["generate_via"] = getattr(cfg, "generate_via", None)
    if sampling is None:
        sampling = {
            k: getattr(cfg, k) for k in ("temperature", "top_p", "top_k") if hasattr(cfg, k)
        }
    rules.update(sampling)
    roles = ("search", "generator", "judge") if spec.needs_judge else ("search",)
    for role in roles:
        try:
            rules[role] = _backend(role, getattr(cfg.backends, role))
        except ConfigError:
            continue
    if not spec.needs_judge:
        rules["generator"] = rules["judge"] = None  # not called: the reward needs no judge
    return rules


def sampling_rules(args: Any) -> dict[str, Any]:
    """The policy's sampling as a TRL config (``GRPOConfig``) applies it, unset fields as the
    values they mean."""
    return {
        "temperature": args.temperature,
        "top_p": args.top_p,
        "top_k": args.top_k or 0,
        "min_p": args.min_p or 0.0,
        "repetition_penalty": args.repetition_penalty,
    }


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def _show(value: Any) -> str:
    return json.dumps(value, sort_keys=True) if isinstance(value, dict) else repr(value)


def _own(key: str, value: Any) -> str:
    """The flag and value that repeat a recorded rule (a backend: its name, configured as then)."""
    if isinstance(value, dict):
        return f"{_flag(key)} {value.get('name')} configured as it was then"
    return f"{_flag(key)} {_show(value)}"


def _differs(key: str, old: Any, new: Any, run: str, where: str, fix: str) -> TrainConfigError:
    return TrainConfigError(
        f"{run} was made with {_flag(key)} {_show(old)} ({where}); this run's is "
        f"{_show(new)}: its rollouts would mix two rules under one run id and its scores would "
        f"mean two things at once. {fix}"
    )


def _missing_note(run: str, missing: list[str], where: str) -> str | None:
    if not missing:
        return None
    return (
        f"{run} records no value of {', '.join(_flag(k) for k in missing)} ({where}: "
        "written before ddai recorded them, or ingested); they could not be checked against this "
        "run's"
    )


def recorded(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The rules each commit of a run's manifest recorded, oldest first (``{}``: none); a commit
    from before the rules were recorded may still name its ``crop_pad``."""
    out = []
    for record in [*manifest.get("history", []), manifest]:
        rules = dict(record.get(RULES_KEY) or {})
        if "crop_pad" in record:
            rules.setdefault("crop_pad", record["crop_pad"])
        out.append(rules)
    return out


def check_append(
    logs: str | Path, run_id: str | None, rules: dict[str, Any], command: str
) -> str | None:
    """Refuse adding rollouts made under ``rules`` to the existing run ``run_id`` when any commit
    of it recorded another value of one of them (``TrainConfigError`` naming the run, the setting,
    both values and the fix); returns a note naming the rules no commit recorded (or None). A run
    not in ``logs`` (a new run) passes."""
    from ddai.pipelines.store.store_read import list_runs, run_manifest

    if run_id is None or run_id not in list_runs(logs):
        return None
    commits = recorded(run_manifest(logs, run_id) or {})
    fix = f"Give {command} a new --run-id, or the run's own {{}} to add to it."
    missing = []
    for key, new in rules.items():
        olds = [c[key] for c in commits if key in c]
        for old in olds:
            if old != new:
                own = _own(key, old)
                raise _differs(key, old, new, f"run {run_id!r}", "its manifest", fix.format(own))
        if len(olds) < len(commits):
            missing.append(key)
    return _missing_note(f"run {run_id!r}", missing, f"{len(commits)} commit(s) in its manifest")


def check_resume(output_dir: str | Path, rules: dict[str, Any], command: str) -> str | None:
    """Refuse ``--resume`` of the run in ``output_dir`` under other ``rules`` than its
    ``run_config.json`` recorded (``TrainConfigError``, as ``check_append``); returns a note when
    the file records none of them (or some), None otherwise."""
    path = Path(output_dir) / "run_config.json"
    old_rules: dict[str, Any] = {}
    if path.is_file():
        old_rules = json.loads(path.read_text(encoding="utf-8")).get(RULES_KEY) or {}
    missing = []
    for key, new in rules.items():
        if key not in old_rules:
            missing.append(key)
        elif old_rules[key] != new:
            fix = (
                f"Resume with the run's own {_own(key, old_rules[key])}, or train a new "
                f"run (another --out-dir and --run-id) with {command}."
            )
            raise _differs(key, old_rules[key], new, f"the run in {output_dir}", str(path), fix)
    return _missing_note(f"the run in {output_dir}", missing, str(path))
