"""What a command refuses of what its grammar (`stability.cli.grammar`) parsed: a value given as ''
for any option or argument (`refuse_empty`), and an option that does nothing in the mode the command
runs in (`refuse_unused`, over `given`: the options set away from their defaults). One line, exit 2."""

from __future__ import annotations

import argparse

from stability.errors import UsageError

__all__ = ["command_parser", "refuse_empty", "given", "refuse_unused"]


def command_parser(p: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The subcommand's own parser (`stability check …`: check's)."""
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    command: argparse.ArgumentParser = sub.choices[args.command]
    return command


def _name(action: argparse.Action) -> str:
    long = [o for o in action.option_strings if o.startswith("--")]
    if long:
        return long[0]
    if action.option_strings:
        return action.option_strings[0]
    metavar = action.metavar
    return str(metavar if isinstance(metavar, str) else action.dest).upper()


def refuse_empty(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """A value given as '' (an unset variable in a script: `--json "$OUT"`, `--compare "$A" "$B"`)
    is refused in one line, for every option and argument of the command: it is never read as
    "not given" (no report written, no case replayed) nor as the current folder."""
    for action in command_parser(p, args)._actions:
        value = getattr(args, action.dest, None)
        values = value if isinstance(value, list | tuple) else [value]
        if any(isinstance(v, str) and v == "" for v in values):
            metavar = action.metavar if isinstance(action.metavar, str) else None
            raise UsageError(
                f"{args.command} {_name(action)} '': an empty value; give {metavar or 'a value'} "
                "(an unset shell variable expands to '')"
            )


def given(p: argparse.ArgumentParser, args: argparse.Namespace, names: list[str]) -> list[str]:
    """Those of the options `names` (as written: "--html") that the command line set away from
    their defaults: what a mode that ignores them must refuse."""
    actions = {o: a for a in command_parser(p, args)._actions for o in a.option_strings}
    out = []
    for name in names:
        action = actions[name]
        default = action.default
        if isinstance(default, str) and callable(action.type):  # argparse converts a string default ("auto")
            default = action.type(default)
        if getattr(args, action.dest, default) != default:
            out.append(name)
    return out


def refuse_unused(p: argparse.ArgumentParser, args: argparse.Namespace, names: list[str], why: str) -> None:
    """Refuse (one line, exit 2) those of `names` that the command line set, where the mode the
    command runs in does nothing with them (`why` says what the mode does): an option is never
    accepted and silently ignored."""
    found = given(p, args, names)
    if found:
        one = len(found) == 1
        raise UsageError(
            f"{', '.join(found)}: {why}, so {'it does' if one else 'they do'} nothing; drop {'it' if one else 'them'}"
        )
