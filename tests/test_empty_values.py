"""An empty (or blank) string given as any value of any command is refused: one line naming the option, exit 2,
nothing written (issue 67, item 4). The cases come from the parsers themselves, so a new command or option is
covered without being listed here."""

import argparse
import json

import pytest

from cselab.cli import build_parser, main
from cselab.errors import ConfigError
from cselab.overrides import apply_override


def _commands(parser, path=()):
    """``(words, parser)`` for each command and subcommand (``cselab`` itself first)."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, (*path, name))


def _cases():
    """Every value-taking option and positional of every command, with the command line that gives it ''."""
    cases = []
    for words, parser in _commands(build_parser()):
        positionals = [a for a in parser._actions if not a.option_strings and not isinstance(
            a, argparse._SubParsersAction)]
        for action in parser._actions:
            if action.nargs == 0 or isinstance(action, argparse._SubParsersAction):
                continue  # flags, --help, --version: no value
            if action.option_strings:
                argv = [*words, action.option_strings[-1], ""]
            else:  # the positionals before it given, so that '' is this one's
                argv = [*words, *["x" for _ in positionals[:positionals.index(action)]], ""]
            name = action.option_strings[-1] if action.option_strings else action.dest
            cases.append(pytest.param(argv, name, id=" ".join([*words, name])))
    return cases


CASES = _cases()


def test_the_cases_cover_the_commands_the_audit_found():
    ids = {case.id for case in CASES}
    assert {"probe run --out", "augment --out", "probe splits --out-dir", "probe export-mteb out", "sweep --out",
            "train --out", "probe compare results", "probe compare --label", "train --set"} <= ids
    assert len(ids) == len(CASES) > 60


def _refusing(parser):
    """``parser`` with every handler replaced by one that fails the test: no command may run."""
    def never(args):
        raise AssertionError(f"a command ran with {args}")
    for _, command in _commands(parser):
        if command.get_default("handler") is not None:
            command.set_defaults(handler=never)
    return parser


@pytest.mark.parametrize("value", ["", "  "])
@pytest.mark.parametrize("argv, name", CASES)
def test_an_empty_value_is_refused_in_one_line_and_nothing_is_written(argv, name, value, tmp_path, monkeypatch,
                                                                      capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results.json").write_text('{"kept": true}\n')
    with pytest.raises(SystemExit) as stop:
        main([*argv[:-1], value], parser=lambda: _refusing(build_parser()))
    err = capsys.readouterr().err
    assert stop.value.code == 2
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1 and f"error: argument {name}: {value!r} is no value" in lines[0], err
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]
    assert json.loads((tmp_path / "results.json").read_text()) == {"kept": True}


def test_an_empty_value_inside_a_repeated_option_is_refused(capsys):
    with pytest.raises(SystemExit):
        main(["probe", "compare", "a.json", "b.json", "--label", "1=a", "--label", ""],
             parser=lambda: _refusing(build_parser()))
    assert "error: argument --label: '' is no value" in capsys.readouterr().err


def test_probe_run_out_empty_keeps_an_existing_results_json(data_dir, tmp_path, monkeypatch, capsys):
    """The audit's case, the command itself: an unset shell variable for --out replaced results.json."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results.json").write_text('{"kept": true}\n')
    with pytest.raises(SystemExit) as stop:
        main(["probe", "run", "--model", "bow", "--suite", "sts", "--limit", "20", "--data-dir", str(data_dir),
              "--out", ""])
    assert stop.value.code == 2 and "error: argument --out: '' is no value" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]
    assert json.loads((tmp_path / "results.json").read_text()) == {"kept": True}


@pytest.mark.parametrize("item", ["encoder.adapter.target_modules=", "training.out= ", "corpus="])
def test_set_with_an_empty_value_is_refused_not_read_as_null(item):
    with pytest.raises(ConfigError, match=r"an empty value is no value; give one, or [\w.]+=null for the default"):
        apply_override({}, item, "a=1")


def test_an_empty_target_modules_is_refused_from_the_command_line(capsys):
    assert main(["train", "--method", "llm2vec", "--set", "encoder.adapter.target_modules=", "--show-config"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--set 'encoder.adapter.target_modules='" in err
