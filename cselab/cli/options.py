"""Options several commands share, defined once, and argparse types that check a value at the edge."""

from __future__ import annotations

import argparse
import copy
import os
from typing import Any

from cselab.registry import MAX_SEED, Param


class Parser(argparse.ArgumentParser):
    """The parser of every cselab command (``add_parser`` makes each subcommand's of the same class). One rule for
    every value given on a command line, whatever its option or positional: an empty or blank string is refused, one
    line naming the option (exit 2). An empty path was read as the default or the working folder (``--out ''`` from
    an unset shell variable replaced a results.json) and an empty name as none; no option takes an empty value to
    mean something (leave the option out for its default). A default is not a value given: it is not checked."""

    def _get_values(self, action: argparse.Action, arg_strings: list[str]) -> Any:
        if action.nargs != argparse.PARSER:  # a subcommand's name is checked by its choices, its arguments here
            blank = next((text for text in arg_strings if not text.strip()), None)
            if blank is not None:
                raise argparse.ArgumentError(action, f"{blank!r} is no value (empty or blank: an unset shell "
                                                     "variable?); give one" + (", or leave the option out" if
                                                                               action.option_strings else ""))
        return super()._get_values(action, arg_strings)


def whole_number(minimum: int, maximum: int | None = None):
    """An argparse type: a whole number >= ``minimum`` (and <= ``maximum``)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum or (maximum is not None and value > maximum):
            expected = f">= {minimum}" if maximum is None else f"from {minimum} to {maximum}"
            raise argparse.ArgumentTypeError(f"{value} is out of range; expected a whole number {expected}")
        return value
    return parse


def add_data_dir(parser: argparse.ArgumentParser, what: str = "data root", required: bool = False) -> None:
    parser.add_argument("--data-dir", required=required,
                        help=f"{what}" + ("" if required else " (default: $CSELAB_DATA_DIR)"))


def add_overrides(parser: argparse.ArgumentParser, example: str) -> None:
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help=f"override a config field (any key of the schema), e.g. {example}")


def add_backbone(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="minilm", help="backbone: minilm (packaged), a folder or a hub name")


def add_profile(parser: argparse.ArgumentParser, what: str = "the method's") -> None:
    parser.add_argument("--profile", help=f"a named set of {what} settings: a paper's per-backbone rows (bert-base, "
                                          "bert-large, roberta-base, roberta-large where the paper gives them) or "
                                          "minilm (the packaged MiniLM's own mean pooling, no prompt)")


def add_seed(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=whole_number(0, MAX_SEED), default=0,
                        help=f"random seed, 0 to {MAX_SEED} (default: 0)")


def comma_list(text: str) -> tuple[str, ...]:
    """An argparse type: names joined by commas."""
    return tuple(name.strip() for name in text.split(",") if name.strip())


def add_settings(parser: argparse.ArgumentParser | argparse._ArgumentGroup, schema: dict[str, Param]) -> None:
    """An option ``--NAME`` for each setting of ``schema`` (a checked dataclass's, :func:`cselab.registry.schema_of`):
    its help, default, choices and bounds come from the declaration, so that a setting is declared in one place."""
    for name, param in schema.items():
        kwargs: dict[str, Any] = {"dest": name, "default": copy.deepcopy(param.default), "help": param.help}
        if param.type is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif param.type is int:
            kwargs["metavar"] = "N"
            low = None if param.min is None else int(param.min) + (1 if param.above else 0)
            high = None if param.max is None else int(param.max) - (1 if param.below else 0)
            kwargs["type"] = whole_number(low, high) if low is not None else int
        elif param.type is float:
            kwargs["type"] = float
        elif param.type in (tuple, list):
            kwargs.update(type=comma_list, metavar="NAME,...")
        elif param.type is os.PathLike:
            kwargs["metavar"] = "PATH"
        if param.allowed() is not None:
            kwargs["choices"] = param.allowed()
        if param.default not in (None, (), []) and param.type is not bool:  # argparse shows a flag's own default
            shown = ",".join(map(str, param.default)) if isinstance(param.default, (tuple, list)) else param.default
            kwargs["help"] += f" (default: {shown})"
        parser.add_argument("--" + name.replace("_", "-"), **kwargs)
