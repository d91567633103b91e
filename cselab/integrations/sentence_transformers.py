"""cselab's losses as sentence-transformers loss modules, for ``SentenceTransformerTrainer``::

    from cselab.integrations.sentence_transformers import CselabLoss

    loss = CselabLoss(model, "info_nce", temperature=0.05)              # (anchor, positive[, negative ...]) columns
    loss = CselabLoss(model, "cosent", matryoshka={"dims": [384, 128]})  # (sentence1, sentence2) and a score label
    loss = CselabLoss(model, "two_way_margin", alpha=0.05, beta=0.2)     # OssCSE's (anchor, paraphrase, negation)

The loss is built from cselab's registry exactly as a method's ``losses.NAME`` is (the same checked parameters and
defaults, ``matryoshka`` too): the dataset's text columns, in order, are the loss's views (its roles, then any further
columns as its list of extra views, e.g. InfoNCE's hard negatives), and the label column is its numeric value (a
scored pair's ``score``). A loss that reads tokens, the initial weights or models of its own (mlm, rtd, recall,
rank_distillation ...) needs cselab's trainer and is refused in one line.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from cselab.errors import ConfigError
from cselab.registry import build
from cselab.train.config.schema import check_losses, loss_plugin, named_models, reads_texts
from cselab.train.objective import apply_loss, value_key
from cselab.train.plugins.kinds import LossContext, NegativeSource


class CselabLoss(nn.Module):
    """A cselab loss (``name``, a loss plug-in, with its ``params``) over a ``SentenceTransformer``'s embeddings of
    the batch's columns; ``forward(sentence_features, labels)`` as every sentence-transformers loss."""

    def __init__(self, model, name: str, columns: int | None = None, **params: Any):
        """``columns``: how many text columns the dataset has (default: the loss's roles); those beyond the roles
        are the loss's extra views (InfoNCE's hard negatives). ``params``: the loss's, as in a method's YAML, and
        ``weight`` (a factor) and ``matryoshka``."""
        super().__init__()
        self.model, self.name = model, name
        where = f"CselabLoss({name!r})"
        plugin = loss_plugin(name, params, where)
        cls = plugin.cls
        if reads_texts(plugin, params, where) or cls.needs_initial_weights or named_models(plugin, params, where):
            raise ConfigError(f"CselabLoss({name!r}): the loss reads tokens or texts, the initial weights or models "
                              "of its own, which only cselab's trainer gives; use `cselab train` with it")
        self.roles, self.lists, self.value_roles = cls.roles, cls.view_lists, cls.value_roles
        extra = max(0, (columns or len(self.roles)) - len(self.roles))
        if extra and not self.lists:
            raise ConfigError(f"CselabLoss({name!r}): {columns} columns, and the loss reads {len(self.roles)} "
                              f"({', '.join(self.roles)})")
        self.extra = [f"{self.lists[0]}_{k}" for k in range(extra)] if extra else []
        views = {role: role for role in self.roles}
        if self.lists:
            views[self.lists[0]] = self.extra
        self.names = names = [*self.roles, *self.extra]  # the views the dataset's columns are, in order
        try:
            self.params = check_losses({name: {**params, **views}}, {view: {"column": view} for view in names})[name]
        except ConfigError as err:  # named as the user wrote it, not as a method's key
            raise ConfigError(str(err).replace(f"losses.{name}", f"CselabLoss({name!r})", 1)) from None
        self.loss = build(loss_plugin(name, self.params), self.params)

    def forward(self, sentence_features: Iterable[dict[str, torch.Tensor]], labels: torch.Tensor | None
                ) -> torch.Tensor:
        embeddings = [self.model(features)["sentence_embedding"] for features in sentence_features]
        if len(embeddings) != len(self.names):
            raise ValueError(f"CselabLoss({self.name!r}) was built for {len(self.names)} columns "
                             f"({', '.join(self.names)}); the batch has {len(embeddings)}: pass "
                             f"columns={len(embeddings)}")
        rows = list(range(len(embeddings[0])))
        encoded = {name: (vectors, rows) for name, vectors in zip(self.names, embeddings, strict=True)}
        for role in (role for role in self.value_roles if self.params.get(role) is not None):
            if labels is None:
                raise ValueError(f"CselabLoss({self.name!r}) reads each row's {role}: the dataset needs a label "
                                 "column")
            encoded[value_key(self.params[role])] = (labels.float().view(-1).to(embeddings[0].device), rows)
        for module in self.loss.modules():
            if isinstance(module, NegativeSource):
                module.new_batch()  # a source of generated negatives makes a new set for each batch
        value = apply_loss(self.loss, LossContext(encoded), self.params.get("matryoshka"))
        return self.params["weight"] * value if value is not None else embeddings[0].sum() * 0.0

    def get_config_dict(self) -> dict[str, Any]:
        """What sentence-transformers' model card records of the loss."""
        return {"loss": self.name, **{k: v for k, v in self.params.items() if k not in (*self.roles, *self.lists)}}
