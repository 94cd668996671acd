"""The flags `repro watch --kubernetes` and `repro run --kubernetes-job N` share, and the command
line their pods run: the flags the user gave, as given, less the ones that print manifests and
the ones the manifest sets itself.

The arguments are read back from the parsed namespace, not from sys.argv: a flag is passed on
when its value differs from its default, in its long form, so `--rounds=8`, `--rounds 8` and an
abbreviation all become the same `--rounds 8`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from repro.core.errors import UsageError
from repro.reporting.kubernetes_pod import DEFAULT_IMAGE

# Files read from this machine's disk when the flag is parsed: a pod does not see them.
LOCAL_FILES = {"--topology": "the hops as --hop flags", "--prompts": "generated prompts (--prompt-chars)",
               "--ca-file": "a CA the image trusts (SSL_CERT_FILE in it)"}


def add_kubernetes_flags(p: argparse.ArgumentParser) -> None:
    """--image, --namespace and --claim, for whichever flag prints the manifests."""
    p.add_argument("--image", default=DEFAULT_IMAGE, help="with the Kubernetes manifests: the container image "
                   "that holds repro (default %(default)s)")
    p.add_argument("--namespace", default="default", help="with the Kubernetes manifests: their namespace "
                   "(default %(default)s)")
    p.add_argument("--claim", metavar="PVC", help="with the Kubernetes manifests: an existing "
                   "PersistentVolumeClaim to write the run folders to (default: the watch's log on an emptyDir; "
                   "a Job's shards on a claim the manifests create)")


def check_kubernetes_flags(args: argparse.Namespace, asked: bool, asked_as: str) -> None:
    """--image, --namespace and --claim only with the flag that prints manifests."""
    if asked:
        return
    for flag, default in (("--image", DEFAULT_IMAGE), ("--namespace", "default"), ("--claim", None)):
        if getattr(args, flag.removeprefix("--"), default) != default:
            raise UsageError(f"{flag} goes with {asked_as} (the manifests it prints); drop it, or add {asked_as}")


def flags_given(parser: argparse.ArgumentParser, args: argparse.Namespace, leave_out: set[str]) -> list[str]:
    """The command-line flags the user gave, in the parser's order, as arguments for the pod."""
    argv: list[str] = []
    for action in parser._actions:  # argparse keeps no other list of its actions
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        flag = max(action.option_strings, key=len)
        value = getattr(args, action.dest, None)
        if flag in leave_out or value is None or value == action.default:
            continue
        if flag in LOCAL_FILES:
            raise UsageError(f"{flag} {value} is a file on this machine, which the pods do not read: give "
                             f"{LOCAL_FILES[flag]} instead")
        if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
            argv.append(flag)
        elif isinstance(action, argparse._AppendAction):
            for item in value:
                argv += [flag, _text(item)]
        elif isinstance(value, (list, tuple)):  # nargs: one flag, its values after it
            argv += [flag, *map(_text, value)]
        else:
            argv += [flag, _text(value)]
    return argv


def _text(value: object) -> str:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
