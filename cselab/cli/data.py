"""``cselab data``: the named data sets under the data root."""

from __future__ import annotations

import argparse

from cselab.cli.options import add_data_dir


def register(data: argparse.ArgumentParser) -> None:
    """``cselab data list|download``."""
    commands = data.add_subparsers(dest="data_command", required=True, metavar="COMMAND")
    listing = commands.add_parser("list", help="list the named data sets and their sizes under the data root")
    add_data_dir(listing)
    listing.set_defaults(handler=list_sets)
    fetch = commands.add_parser(
        "download", help="fetch STS12-16, STS-B and SICK-R from the Hugging Face hub",
        description="Fetch MTEB's hub copies of STS12-16, STS-B and SICK-R into DIR/senteval/downstream "
                    "(needs a network).")
    add_data_dir(fetch, "folder to write the data root into", required=True)
    fetch.set_defaults(handler=fetch_sets)


def list_sets(args: argparse.Namespace) -> None:
    from cselab.data.catalog import named_sets

    found = named_sets(args.data_dir)
    key, kind, size = (max(len(getattr(s, field)) for s in found) for field in ("key", "kind", "size"))
    for s in found:
        print(f"{s.key:{key}}  {s.kind:{kind}}  {s.size:{min(size, 48)}}  {s.description}")


def fetch_sets(args: argparse.Namespace) -> None:
    from cselab.data.download import download

    for path in download(args.data_dir):
        print(path)
