"""Options several commands share, defined once, and argparse types that check a value at the edge."""

from __future__ import annotations

import argparse


def whole_number(minimum: int):
    """An argparse type: a whole number >= ``minimum``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is out of range; expected a whole number >= {minimum}")
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
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
