"""Command line: ``cselab augment|train|sweep|probe|data ...``; ``probe`` is ``cselab probe``.

One module per command group (:mod:`cselab.cli.probe`, :mod:`~cselab.cli.augment`, :mod:`~cselab.cli.train`,
:mod:`~cselab.cli.sweep`, :mod:`~cselab.cli.data`), each a thin layer over library functions; shared options
are in :mod:`cselab.cli.options`. A user's mistake (:class:`~cselab.errors.CselabError`), a full disk and a file the
system refuses (permission denied, a read-only file system) are printed as one line and exit with status 2; Ctrl-C
and SIGTERM end a command with one line saying what was kept and how to go on (status 130); anything else is a bug
and keeps its traceback.
"""

from __future__ import annotations

import argparse
import errno
import os
import shutil
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cselab import __version__
from cselab.atomic import disk_full
from cselab.boundary import failure_of
from cselab.cli import augment, data, probe, sweep, train
from cselab.cli.options import Parser
from cselab.errors import CselabError, did_you_mean
from cselab.files import printable
from cselab.provenance import record_command


def _top(prog: str, description: str) -> argparse.ArgumentParser:
    parser = Parser(prog=prog, description=description)  # every value given checked (Parser's rule)
    parser.add_argument("--version", action="version", version=f"cselab {__version__}")
    parser.add_argument("--debug", action="store_true", help="show the traceback of every error, a user's mistakes "
                                                             "included")
    return parser


def build_probe_parser() -> argparse.ArgumentParser:
    """The ``probe`` command's parser: ``cselab probe``'s, under its own name (its usage and errors say ``probe``)."""
    parser = _top("probe", "Score any encoder.")
    probe.register(parser)
    return parser


def build_parser(suites: bool = True) -> argparse.ArgumentParser:
    """``cselab``'s parser; ``suites``: with the options the probe suites declare
    (:func:`cselab.cli.probe.register`)."""
    parser = _top("cselab", "Contrastive sentence embeddings: augment, train, probe.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    probe.register(commands.add_parser("probe", help="score encoders: STS, bias, transfer, probing, geometry",
                                            description="Score any encoder."), suites)
    augment.register(commands.add_parser(
        "augment", help="build the cached training corpus (negations, back-translated paraphrases)",
        description="Build the cached training corpus: for each sentence a negation by dependency parse and a "
                    "back-translated paraphrase kept when its MER to the sentence lies in the band. Resumable; "
                    "the same config twice is a no-op.",
        epilog="Example:\n  cselab augment --corpus wiki1m --out cache/augment --backend apertium",
        formatter_class=argparse.RawDescriptionHelpFormatter))
    train.register(commands.add_parser(
        "train", help="train a sentence encoder on the augment cache",
        description="Train a sentence encoder with a method preset on the augment cache; keeps the checkpoint best on "
                    "the dev scorer (training.dev, STS-B dev by default) in OUT/best (usable as `probe run --model "
                    "OUT/best`) and resumes from OUT/last.",
        epilog="Examples:\n  cselab train --method osscse --model minilm --data cache/augment --out runs/osscse "
               "--set training.max_steps=200\n"
               "  accelerate launch --multi_gpu --num_processes 4 -m cselab.cli train --method simcse "
               "--model bert-base-uncased --out runs/simcse\n"
               "(on several processes training.batch_size is the whole batch, split across them)",
        formatter_class=argparse.RawDescriptionHelpFormatter))
    sweep.register(commands.add_parser(
        "sweep", help="train methods over several seeds (and a grid) and report mean ± std",
        description="Train every method x grid point x seed one after another, score each run (STS12-16, STS-B, "
                    "SICK-R; alignment and uniformity on STS-B dev) and write mean ± std and a 95% interval over "
                    "seeds per method and task, and each method's STS average against the first's (hierarchical "
                    "bootstrap over seeds and pairs, docs/comparing.md). Started again on the same OUT it skips "
                    "scored runs and resumes a half-trained one.",
        epilog="Example:\n  cselab sweep --methods simcse,noise-neg,awp-fgsm --seeds 3 --set training.max_steps=50 "
               "--out sweeps/variants\n"
               "  cselab sweep --methods noise-neg --grid losses.info_nce.generated.count=64,256 --out sweeps/count",
        formatter_class=argparse.RawDescriptionHelpFormatter))
    data.register(commands.add_parser("data", help="list or fetch data sets",
                                           description="The data sets under the data root."))
    return parser


def _terminate(signum, frame) -> None:
    raise KeyboardInterrupt  # SIGTERM ends a command as Ctrl-C does: its files closed, its lock released


def _no_space(err: OSError) -> str:
    where = Path(err.filename or ".")
    folder = next((p for p in (where, *where.parents) if p.is_dir()), Path("."))
    free = shutil.disk_usage(folder).free / 2**20
    return (f"{where}: no space left on the device ({free:.0f} MiB free in {folder}); free some space and run the "
            "same command again (a run resumes, a cache keeps its finished chunks)")


REFUSED = (errno.EACCES, errno.EPERM, errno.EROFS)  # a file the system will not let this user read or write


def _refused(err: OSError) -> str:
    what = "a read-only file system" if err.errno == errno.EROFS else "permission denied"
    return (f"{err.filename or 'a file'}: cannot be {'written' if err.errno == errno.EROFS else 'read or written'} "
            f"({what}); check its permissions, or give another path")


def _closed_pipe() -> int:
    """The reader of standard output went away (``cselab train --list-methods | head``): stop quietly, as a command
    killed by SIGPIPE does (status 141), with standard output pointed at /dev/null so that the interpreter's last
    flush raises nothing."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + signal.SIGPIPE


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``argv`` parsed; an argument no command takes is refused by the command it was given to (its usage, its
    name: ``probe run: error: ...``), with the closest option suggested."""
    def mark(level: argparse.ArgumentParser) -> None:
        for action in level._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    sub.set_defaults(parser_=sub)
                    mark(sub)
    mark(parser)
    args, extras = parser.parse_known_args(argv)
    if extras:
        where = getattr(args, "parser_", parser)
        options = [option for action in where._actions for option in action.option_strings]
        hint = did_you_mean(extras[0].split("=")[0], options, 1) if extras[0].startswith("-") else ""
        where.error(f"unrecognized arguments: {printable(' '.join(extras))}{hint}")
    return args


def main(argv: list[str] | None = None, parser: Callable[[], argparse.ArgumentParser] | None = None,
         command: list[str] | None = None) -> int:
    """``cselab ...``; ``parser``: what builds another command's parser (``probe``'s), ``command``: the cselab
    command line it is."""
    stdout, sys.stdout = sys.stdout, Printable(sys.stdout)  # type: ignore[assignment]  # writes as a TextIO does
    try:
        try:
            code = _main(argv, parser, command)
        finally:  # also after --help (argparse's exit): a closed pipe is found here, not at the interpreter's exit
            sys.stdout.flush()
    except BrokenPipeError:
        return _closed_pipe()
    finally:
        sys.stdout = stdout
    return code


class Printable:
    """A command's standard output: what it writes goes through :func:`cselab.files.printable` (lines and tabs kept),
    so that a control character in a user's text (a label, a path, a model's name) shows as ``\\x1b`` instead of
    acting on the terminal; everything else is the stream's."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        return self.stream.write(printable(text, keep="\n\t"))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def _error(message: object) -> None:
    """One line on standard error: ``error: MESSAGE``, its control characters written visibly (a multi-line message
    keeps its lines)."""
    print(f"error: {printable(str(message), keep=chr(10))}", file=sys.stderr)


def _main(argv: list[str] | None, parser: Callable[[], argparse.ArgumentParser] | None,
          command: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:  # the probe commands' options come from the suites found: a broken package of them is one line
        built = parser() if parser is not None else build_parser(suites="probe" in argv)
    except CselabError as err:
        _error(err)
        return 2
    args = parse(built, argv)
    record_command(command or ["cselab", *argv])
    terminate = signal.signal(signal.SIGTERM, _terminate) if threading.current_thread() is threading.main_thread() \
        else None
    try:
        args.handler(args)
    except KeyboardInterrupt:
        if args.debug:
            raise
        print(f"interrupted: {printable(_kept(args))}", file=sys.stderr)
        return 130
    except Exception as err:
        said = None if args.debug else _one_line(err, args)
        if said is None:
            if isinstance(err, CselabError):  # --debug: the traceback of what caused it too (a user's factory)
                err.__suppress_context__ = False
            raise
        _error(said)
        return 2
    finally:
        if terminate is not None:
            signal.signal(signal.SIGTERM, terminate)
    return 0


def _one_line(err: Exception, args: argparse.Namespace) -> str | None:
    """What an error says in one line: a plug-in's failure (what it raised, during what, what was kept), a user's
    mistake, a full disk or a refused file; None for anything else (a bug: its traceback)."""
    failure = failure_of(err)
    if failure is not None:
        return failure.line(kept=_kept(args))
    if isinstance(err, CselabError):
        return str(err)
    if isinstance(err, OSError):
        full = disk_full(err, err.filename or ".")
        if full or err.errno in REFUSED:
            return _no_space(err) if full else _refused(err)
    return None


def _kept(args: argparse.Namespace) -> str:
    """What a command that stopped part way kept, and how to go on (its ``interrupted`` default)."""
    return getattr(args, "interrupted", lambda _: "nothing was left half-written")(args)


def probe_main(argv: list[str] | None = None) -> int:
    """The ``probe`` command: ``probe run ...`` is ``cselab probe run ...`` (``--debug`` anywhere is cselab's)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    debug, rest = ["--debug"] if "--debug" in argv else [], [arg for arg in argv if arg != "--debug"]
    return main([*debug, *rest], build_probe_parser, ["cselab", *debug, "probe", *rest])
