"""The ``ddai`` command: one Typer app whose sub-commands load only when they run.

``COMMANDS`` names every top-level command, the module under ``ddai.cli`` that registers it
(``register(app)``) and its one-line help. ``ddai --help`` lists them from this table alone, so it
imports no command module (nor DuckDB, pyarrow, polars, torch); ``ddai X …`` imports X's module(s)
and nothing else. A new command is one line here plus its module's ``register``.

Longer than 400 lines because the registry's tables (``COMMANDS``, ``SUBCOMMANDS``, the deprecated
spellings) and the lazy group that reads them change together.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, NamedTuple

import typer
import typer.main
from typer.core import TyperCommand, TyperGroup

from ddai.cli import coerce

coerce.install()  # flag values converted without importing pydantic (~0.1-0.25 s)

try:  # typer >= 0.22 carries its own click; importing the separate package would cost ~50 ms
    from typer import _click as click
    from typer._click.exceptions import BadOptionUsage
except ImportError:  # pragma: no cover - older typer runs on the click package
    import click
    from click.exceptions import BadOptionUsage


class Entry(NamedTuple):
    """Where a top-level command comes from: its modules (in registration order) and short help."""

    modules: tuple[str, ...]
    help: str


def _e(modules: str, help_text: str) -> Entry:
    return Entry(tuple(modules.split()), help_text)


# One line per command; the order is the order of ``ddai --help``. ``train`` is filled by several
# modules (``train_sft`` adds ``train sft``, ``train`` ``train grpo``, ``value_train``
# ``train value``, ``value_sft`` ``train value-sft``, ``ppo`` ``train ppo``, ``plan``
# ``train plan``).
COMMANDS: dict[str, Entry] = {
    "demo": _e("demo", "Run the whole loop on the synthetic world: world → ingest → funnel → distill (→ train) → report."),
    "ingest": _e("ingest", "Ingest rollout logs; unreadable rows go to _quarantine/<run>/ with a reason."),
    "query": _e("query", "Run SQL over the rollout-log views and print or save the result."),
    "runs": _e("runs", "List the runs in the log store with counts, mean scores and what their rollouts carry."),
    "fixtures": _e("fixtures", "The synthetic world: a page corpus, a prompt set and simulated runs with a truth table."),
    "corpus": _e("corpus", "Page corpora: build one from page images for search, crops and the generator."),
    "curate": _e("curate_bucket curate_verify curate_focus curate_plan", "The curation funnel: bucket prompts by score, verify ground truth, focus the next round, plan its rollout budget."),
    "lineage": _e("lineage", "Walk the manifests of FILE back to the raw logs and print the funnel."),
    "analyze": _e("analyze", "DDAI's round analyses: why low-scoring prompts fail, reward latency and coverage, zero-variance groups and the prompts to drop or keep."),
    "distill": _e("distill distill_vet", "Rare-success SFT distillation: select successful rollouts of hard prompts, rewrite their thinks (optional), run the safety post-pass; vet SFT trajectories with an LLM."),
    "report": _e("report", "Write one self-contained HTML report of the rollout logs (opens offline)."),
    "serve": _e("serve", "Serve a local, read-only web explorer over every rollout of the log store."),
    "backends": _e("backends", "Model backends: `check` lists them with their roles, pings them, shows cache stats."),
    "judge": _e("backends", "(Re)score a run's answers with a judge backend; failures stay null with their reason."),
    "collect": _e("collect", "Roll out a policy and log scored episodes, without training."),
    "train": _e("train_sft train value_train value_sft ppo plan", "Train the Searcher: SFT, then GRPO over the search environment."),
    "eval": _e("eval", "Evaluate a Searcher policy on a test set (DDAI's format): accuracy, judge and NDCG by the set's own categories."),
    "model": _e("model", "Build tiny local models (nothing is downloaded)."),
    "value": _e("value_score", "Value heads over the rollout log: per-turn value estimates."),
    "pointer": _e("pointer_world pointer_embed pointer_gen pointer_process pointer_train pointer_eval", "Pointer selector (seed 002): pick 2 in-context demonstrations out of K with a pointer network."),
}  # fmt: skip


# Old flag spellings that still work: (command path) → {old: new}. One vocabulary across commands:
# ``--out`` is a file, ``--out-dir`` a folder, ``--input-format`` what is read, ``--format`` what is
# written. A command line using an old spelling is rewritten before parsing, with a one-line notice
# on stderr; ``--help`` shows only the new names.
DEPRECATED_FLAGS: dict[tuple[str, ...], dict[str, str]] = {
    ("ingest",): {"--format": "--input-format", "--out": "--logs"},
    ("curate", "bucket"): {"--out": "--out-dir"},
    ("curate", "verify-gt"): {"--out": "--out-dir"},
    ("pointer", "train"): {"--out": "--out-dir"},
    ("pointer", "eval"): {"--out": "--out-dir"},
    ("train", "sft"): {"--out": "--out-dir"},
    ("train", "grpo"): {"--out": "--out-dir"},
    ("train", "value"): {"--out": "--out-dir"},
    ("train", "ppo"): {"--out": "--out-dir"},
    ("train", "value-sft"): {"--out": "--out-dir"},
}


# Old command paths that still work for one release: (old words) → (new words). A command line
# starting with an old path is rewritten before parsing, with one line on stderr; the old path is
# not registered, so no ``--help`` lists it.
DEPRECATED_COMMANDS: dict[tuple[str, ...], tuple[str, ...]] = {
    ("train", "collect"): ("collect",),
}


def _command_path(args: list[str]) -> tuple[str, ...]:
    """The command words of ``args``: ``("curate", "bucket")`` of ``curate bucket --out d``,
    ``("ingest",)`` of ``ingest FILE --format verl``."""
    if not args or args[0].startswith("-"):
        return ()
    if len(args) > 1 and (args[0], args[1]) in DEPRECATED_FLAGS:
        return (args[0], args[1])
    return (args[0],)


def _two_value_compare(args: list[str]) -> list[str]:
    """``--compare A B`` (the old two-value form) as ``--compare A --compare B``."""
    out: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        out.append(a)
        if (
            a == "--compare"
            and i + 2 < len(args)
            and not args[i + 1].startswith("-")
            and not args[i + 2].startswith("-")
        ):
            out += [args[i + 1], "--compare", args[i + 2]]
            i += 3
            continue
        i += 1
    return out


def rewrite_args(args: list[str], notice: Any = None) -> list[str]:
    """``args`` with deprecated flag spellings replaced by the current ones (``notice(line)`` is
    called once per replaced flag, and for a deprecated command path). Only words before a ``--``
    are flags."""
    for old, new in DEPRECATED_COMMANDS.items():
        if tuple(args[: len(old)]) == old:
            args = [*new, *args[len(old) :]]
            if notice is not None:
                notice(f"`ddai {' '.join(old)}` is deprecated: use `ddai {' '.join(new)}`")
            break
    path = _command_path(args)
    if path[:1] == ("report",):
        args = _two_value_compare(args)
    table = DEPRECATED_FLAGS.get(path, {})
    if not table:
        return args
    out: list[str] = []
    told: set[str] = set()
    for i, a in enumerate(args):
        if a == "--":
            out += args[i:]
            break
        flag, eq, value = a.partition("=")
        new = table.get(flag)
        if new is None:
            out.append(a)
            continue
        out.append(new + eq + value)
        if notice is not None and flag not in told:
            told.add(flag)
            notice(f"note: `ddai {' '.join(path)} {flag}` is now {new}; the old spelling will go.")
    return out


def _find_command(group: click.Command, args: list[str]) -> click.Command:
    """The (sub)command ``args`` name under ``group``: ``curate bucket …`` → bucket."""
    command = group
    for word in args:
        sub = getattr(command, "commands", None)
        if word.startswith("-") or sub is None or word not in sub:
            break
        command = sub[word]
    return command


def _choices(param: Any) -> list[str]:
    """An option's allowed values (an Enum annotation or a click Choice), else none."""
    import enum

    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return [str(m.value) for m in annotation]
    return [str(c) for c in getattr(getattr(param, "type", None), "choices", None) or []]


# Commands that read the demo's store while ``<home>/logs`` does not exist (``logs_dir``'s
# ``demo_fallback``): their ``--run`` hint lists the demo's runs then.
DEMO_READERS = frozenset({"report", "serve", "query", "runs"})


def _logs_flag(args: list[str]) -> str | None:
    """The ``--logs`` value on the command line (``--logs DIR`` or ``--logs=DIR``), if any."""
    for i, arg in enumerate(args):
        if arg == "--logs" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--logs="):
            return arg.split("=", 1)[1]
    return None


def _hint_for_missing_value(
    e: BadOptionUsage, command: click.Command, args: list[str] | None = None
) -> None:
    """Add "did you mean" to click's "Option '--x' requires an argument.": the choices of the
    option, for ``--run`` the runs of the store the command would read (its ``--logs``, else the
    default store, or the demo's for a ``DEMO_READERS`` command), else the option's placeholder."""
    name = e.option_name
    if not name or "requires" not in e.message:
        return
    param = next((p for p in command.params if name in getattr(p, "opts", ())), None)
    if param is None:
        return
    choices = _choices(param)
    if choices:
        e.message += f" Did you mean {name} " + " or ".join(map(str, choices)) + "?"
        return
    if name == "--run":
        from ddai.pipelines import store
        from ddai.pipelines.store import workspace

        args = args or []
        reader = bool(args) and args[0] in DEMO_READERS
        try:
            logs = workspace.logs_dir(_logs_flag(args), demo_fallback=reader, note=False)
            runs = store.list_runs(logs)
        except Exception:  # no store yet: fall back to the placeholder
            runs = []
        if runs:
            shown = ", ".join(runs[:8]) + (", …" if len(runs) > 8 else "")
            e.message += f" Did you mean {name} <run>, one of: {shown}?"
            return
    e.message += f" Give it a value: {name} {param.metavar or (param.name or 'value').upper()}."


NO_BARS_HELP = (
    "Show progress bars (on stderr). This command draws none; the flag is accepted so a script "
    "can pass --no-progress to every command."
)


def _no_bars_flag() -> click.Parameter:
    """``--progress/--no-progress`` as Typer builds it, not passed to the command's function."""
    probe = typer.Typer(rich_markup_mode=None)

    @probe.command()
    def _probe(progress: bool = typer.Option(True, "--progress/--no-progress", help=NO_BARS_HELP)):
        del progress

    flag = next(p for p in typer.main.get_command(probe).params if p.name == "progress")
    flag.expose_value = False
    return flag


def _accept_progress(command: click.Command) -> None:
    """Give every command below ``command`` without ``--progress/--no-progress`` the flag (not
    passed to its function: it has no bar to hide), so scripts can pass it to any command."""
    for sub in getattr(command, "commands", {}).values():
        _accept_progress(sub)
    if hasattr(command, "commands"):
        return
    if not any("--no-progress" in p.secondary_opts for p in command.params):
        command.params.append(_no_bars_flag())


# Groups that several modules fill: the module registering each sub-command and its one-line
# help, so running one loads only its own module (``ddai train grpo --help`` imports neither ppo,
# value nor plan) and the group's listing (``ddai train --help``) loads none.
SUBCOMMANDS: dict[str, dict[str, Entry]] = {
    "train": {
        "sft": _e("train_sft", "Supervised fine-tuning on Searcher conversations (TRL)."),
        "grpo": _e("train", "GRPO over the multi-turn search environment."),
        "value": _e("value_train", "Train a value head on terminal outcomes from the rollout log."),
        "value-sft": _e(
            "value_sft", "Seed 004's joint stage: SFT weighted by the critic's TD error."
        ),
        "ppo": _e("ppo", "PPO with a value-head critic and GAE over the search environment."),
        "plan": _e("plan", "Per-rank GPU memory of a training run before it starts."),
    },
    "curate": {
        "bucket": _e(
            "curate_bucket", "Split a dataset into buckets B / A / 0 by a per-prompt score."
        ),
        "verify-gt": _e("curate_verify", "Propose ground-truth errors for review."),
        "focus": _e("curate_focus", "Build the next focused round: hard A + verified bucket 0."),
        "plan": _e(
            "curate_plan", "Estimate mixed GRPO groups, rare successes and cost per bucket."
        ),
    },
    "value": {
        "score": _e("value_score", "Write per-turn value estimates into the rollout log."),
    },
    "pointer": {
        "world": _e(
            "pointer_world", "Make (or load) a synthetic VQA world for the pointer selector."
        ),
        "embed": _e("pointer_embed", "Export query and candidate embeddings to a store."),
        "gen": _e("pointer_gen", "Generate pointer candidates and record their VQA answers."),
        "process": _e(
            "pointer_process", "Flatten raw records into per-pointer rows with a reward."
        ),
        "train": _e("pointer_train", "Train the pointer selector."),
        "eval": _e("pointer_eval", "Held-out VQA accuracy of each selector's pairs."),
    },
}


# Groups one module registers whole (``ddai distill`` runs itself, the others list their
# commands from the module's own group): each sub-command's one-line help, beside its siblings'.
GROUP_COMMANDS: dict[str, dict[str, str]] = {
    "analyze": {
        "attribution": "Why low-scoring prompts fail: search, generator or ground truth.",
        "latency": "Reward latency, judge timeouts and reward coverage per run.",
        "drop-keep": "Zero-variance GRPO groups and the prompts to drop or keep.",
    },
    "distill": {
        "check": "Run the safety post-pass over an existing SFT file.",
        "convert": "Convert an SFT file between the train1 and messages shapes.",
        "vet": "Vet SFT trajectories with an LLM judge (DDAI's criteria).",
    },
    "fixtures": {"make": "Write the synthetic world: pages, prompts, runs, truth table."},
    "backends": {"check": "List the backends and their roles, ping them, show cache stats."},
    "corpus": {"build": "Build a page corpus from page images."},
    "model": {"tiny": "Build a tiny Qwen2-architecture causal LM and its tokenizer."},
}


def load_command(name: str, modules: tuple[str, ...] | None = None) -> click.Command:
    """The real click command ``name``: imports its modules (``modules``: only those, for one
    sub-command of a group in ``SUBCOMMANDS``) and registers them on a scratch app."""
    scratch = typer.Typer(rich_markup_mode=None)
    for module in modules or COMMANDS[name].modules:
        importlib.import_module(f"ddai.cli.{module}").register(scratch)
    group = typer.main.get_group(scratch)
    command = group.commands.get(name)
    if command is None:  # a registry line whose module does not register that name
        raise RuntimeError(f"ddai.cli: {COMMANDS[name].modules} register no command {name!r}")
    _accept_progress(command)
    return command


class _Stub(TyperCommand):
    """A registry line shown by ``ddai --help`` (name and short help) until the command runs."""

    def __init__(self, name: str, entry: Entry) -> None:
        super().__init__(name, help=entry.help, short_help=entry.help)


def _listing(name: str) -> click.Group:
    """The group ``name`` of ``SUBCOMMANDS`` as its ``--help`` shows it, no module loaded."""
    group = TyperGroup(
        name=name, help=COMMANDS[name].help, no_args_is_help=True, rich_markup_mode=None
    )
    for sub, entry in SUBCOMMANDS[name].items():
        group.add_command(_Stub(sub, entry))
    return group


class _Commands(dict[str, click.Command]):
    """The group's commands: stubs until looked up by name, then the real, loaded command.

    ``peek`` gives what is there without loading (the help listing); ``[name]`` and ``get`` load,
    so code that reads ``group.commands[name]`` (its params, its help) sees the real command."""

    def peek(self, name: str) -> click.Command | None:
        return dict.get(self, name)

    def __getitem__(self, name: str) -> click.Command:
        command = dict.__getitem__(self, name)
        if isinstance(command, _Stub):
            command = load_command(name)
            self[name] = command
        return command

    def get(self, name: str, default: Any = None) -> Any:
        return self[name] if name in self else default  # noqa: SIM401 (loads)


class LazyGroup(TyperGroup):
    """The top-level group: lists ``COMMANDS`` from the table, loads one when it is invoked."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        commands = _Commands({name: _Stub(name, entry) for name, entry in COMMANDS.items()})
        commands.update(self.commands)  # commands registered on ``app`` itself, if any
        self.commands = commands

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return self.commands.peek(cmd_name)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        args = rewrite_args(list(args), notice=lambda line: click.echo(line, err=True))
        ctx.meta["ddai.args"] = args
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BadOptionUsage as e:
            args = ctx.meta.get("ddai.args", [])
            _hint_for_missing_value(e, _find_command(self, args), args)
            raise
        except typer.Exit:  # the command said why (``fail``): said once
            raise
        except Exception as e:  # an unreachable S3 endpoint or no credentials: say what to set
            from ddai.cli.common import fail
            from ddai.pipelines.store.objstore import setup_error

            if (why := setup_error(e)) is None:
                raise
            raise fail(why) from e

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        if name is not None:
            table = SUBCOMMANDS.get(name, {})
            own = table.get(rest[0]) if rest else None
            if own is not None:
                command = load_command(name, own.modules)
            elif table and (not rest or rest[0] in ctx.help_option_names):
                command = _listing(name)
            else:
                command = self.commands[name]
        return name, command, rest


app = typer.Typer(
    name="ddai",
    cls=LazyGroup,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Plain help: rich markup would eat bracketed text such as ``[roles]`` and cut flag names at
    # 80 columns; click's formatter prints every character, wraps, and marks [required].
    rich_markup_mode=None,
    add_completion=True,
)


def group_app(group: str, **attrs: Any) -> typer.Typer:
    """The sub-app of ``group``, its help its ``COMMANDS`` line: one text for ``ddai --help`` and
    ``ddai GROUP --help``, written once."""
    attrs = {"no_args_is_help": True, **attrs}
    return typer.Typer(help=COMMANDS[group].help, rich_markup_mode=None, **attrs)


def sub_app(parent: typer.Typer, name: str) -> typer.Typer:
    """The sub-app ``name`` of ``parent`` (registered by its own area), else a new
    ``group_app``."""
    for info in parent.registered_groups:
        if info.name == name and info.typer_instance is not None:
            return info.typer_instance
    sub = group_app(name)
    parent.add_typer(sub, name=name)
    return sub


def top_command(name: str, command: Any, **attrs: Any) -> Any:
    """The ``register(app)`` of a module holding the one top-level command ``name``; its short
    help is its ``COMMANDS`` line, as ``ddai --help`` lists it before it is loaded."""
    attrs = {"short_help": COMMANDS[name].help, **attrs}

    def register(app: typer.Typer) -> None:
        app.command(name, **attrs)(command)

    return register


def group_command(group_app: typer.Typer, group: str, name: str) -> Any:
    """``group_app.command(name)`` with its line of ``GROUP_COMMANDS`` as short help."""
    return group_app.command(name, short_help=GROUP_COMMANDS[group][name])


def subcommand(group: str, name: str, command: Any) -> Any:
    """The ``register(app)`` of a module holding one command of a ``SUBCOMMANDS`` group: adds
    ``command`` as ``ddai GROUP NAME`` with its table line as short help."""

    short_help = SUBCOMMANDS[group][name].help

    def register(app: typer.Typer) -> None:
        sub_app(app, group).command(name, short_help=short_help)(command)

    return register


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"ddai {version('ddai')}")
        raise typer.Exit()


@app.callback()
def _root(
    _show_version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print ddai's version and exit."
    ),
) -> None:
    """Data-centric RL for agentic search policies: ingest rollout logs, query them, curate the
    next round, distill rare successes, report, and train."""


# Commands over the log store that never use pandas: they run as if it were not installed, since
# pyarrow, plotly and DuckDB each import it at their first use when it is (0.3 s, as much as the
# rest of `ddai ingest`'s start). Not the training commands: `datasets` needs pandas.
PANDAS_FREE = frozenset(
    {"ingest", "query", "runs", "curate", "lineage", "analyze", "distill", "report", "serve"}
)


def main() -> None:
    if next(iter(_command_path(sys.argv[1:])), None) in PANDAS_FREE:
        from ddai.pipelines.records.lazy import run_without

        run_without("pandas")
    try:
        app()
    finally:
        # A training command under ``accelerate launch``/``torchrun`` ends its process group here
        # (only when torch.distributed was imported: other commands stay free of torch).
        if "torch.distributed" in sys.modules:
            from ddai.trainer.runtime.dist import shutdown

            shutdown()


if __name__ == "__main__":
    main()
