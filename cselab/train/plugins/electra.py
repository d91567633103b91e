"""DiffCSE's conditional replaced-token detection (Chuang et al., 2022; voidism/DiffCSE), the ``rtd`` loss: a
frozen masked-LM **generator** rewrites each sentence whose tokens were masked, and a **discriminator**, a trained
copy of the initial backbone whose first input position is the sentence's vector, tells each position's token
replaced or not.

The released code does this with a patched transformers 4.2.1 whose ``BertModel.forward`` takes a ``cls_input`` that
replaces the embedding layer's output at position 0; here a forward hook on the discriminator's embedding layer does
the same to an unpatched model (:class:`ConditionedDiscriminator`). The generator is rebuilt from its spec (its
weights' sha256 is part of the run's identity); the discriminator and its two-way head are trained with the encoder,
saved in ``OUT/last`` and never in a checkpoint.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from cselab.errors import ConfigError
from cselab.files import shown
from cselab.registry import REQUIRED, Param, register, setting
from cselab.train.plugins import functional as L
from cselab.train.plugins.kinds import Loss, LossContext
from cselab.train.plugins.losses import masked_views


class ConditionedDiscriminator(nn.Module):
    """A transformer whose embedding layer's output at the first position is replaced by a sentence vector, and a
    two-way linear head over every position (PyTorch's initialisation, as the released ``electra_head``)."""

    model: Any  # a transformers encoder: its embedding layer read by name

    def __init__(self, model: nn.Module, hidden: int):
        super().__init__()
        embeddings = getattr(model, "embeddings", None)
        if not isinstance(embeddings, nn.Module):
            raise ConfigError(f"{type(model).__name__} has no embeddings module whose output the sentence vector "
                              "can replace at the first position; the rtd loss needs a BERT-like encoder")
        self.model, self.head = model, nn.Linear(hidden, 2)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, condition: torch.Tensor) -> torch.Tensor:
        def first_replaced(module, inputs, output):
            return torch.cat([condition.unsqueeze(1).to(output.dtype), output[:, 1:]], dim=1)

        hook = self.model.embeddings.register_forward_hook(first_replaced)  # for this pass only
        try:
            states = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        finally:
            hook.remove()
        return self.head(states)


def same_vocabulary(generator_tokenizer, tokenizer, spec: str, where: str) -> None:
    """Refuse a generator whose token ids mean other tokens than the model's: its predictions are read as ids of the
    model's vocabulary."""
    theirs, ours = generator_tokenizer.get_vocab(), tokenizer.get_vocab()
    if theirs != ours:
        differing = sorted(set(theirs.items()) ^ set(ours.items()), key=str)[0]
        raise ConfigError(f"{where}: {shown(spec)} has another vocabulary than the model ({len(theirs)} and "
                          f"{len(ours)} tokens; {differing[0]!r} differs), and its predictions are read as the "
                          "model's token ids; use a generator with the model's tokenizer (DiffCSE: "
                          "distilbert-base-uncased for bert-base-uncased, distilroberta-base for roberta-base)")


@register("loss", "rtd")
class ReplacedTokenDetection(Loss):
    """DiffCSE's conditional ELECTRA loss on each of ``views`` (their vectors after the head, and their tokens): the
    tokens masked, the generator's most likely token at every position (the first kept), the discriminator
    conditioned on the view's vector predicting which positions changed
    (:func:`~cselab.train.plugins.functional.replaced_token_detection`, one value per row)."""

    view_lists, needs_tokens, model_params = ("views",), True, ("generator",)
    generator: nn.Module | None  # in __dict__: not a submodule

    @dataclass(frozen=True, kw_only=True)
    class Params(Loss.Params):
        generator: str = setting(REQUIRED, "the frozen masked LM that rewrites the masked sentences: a folder or "
                                 "hub name with the model's vocabulary (DiffCSE: distilbert-base-uncased)")
        mask_ratio: float = setting(0.3, "share of each sentence's tokens masked for the generator (80% "
                                    "[MASK], 10% a random token, 10% kept)", min=0.0, max=1.0, above=True)
        generator_dropout: bool = setting(True, "run the generator with dropout, as the released code (its "
                                          "generator is a submodule of the model the Trainer puts in train mode)")

    def __init__(self, params: Params, **views):
        super().__init__(params, **views)
        self.__dict__["generator"] = None  # loaded in auxiliary(): frozen, rebuilt from its spec, not state

    @classmethod
    def view_schema(cls):
        return {"views": Param(list, REQUIRED, items=Param(str), help="the views whose vectors condition the "
                               "discriminator on their own rewritten tokens (DiffCSE: both dropout views, [anchor, "
                               "positive])")}

    def auxiliary(self, encoder) -> nn.Module:
        """Load the generator (checked to share the model's vocabulary) and build the discriminator: a copy of the
        initial backbone, its pooler left out of training, and a two-way head."""
        from cselab.encoders.loading import resolve_backbone
        from cselab.encoders.pretrained import check_vocabulary, load_tokenizer
        from cselab.train.language_models import load_masked_lm

        spec = self.params.generator
        path = resolve_backbone(spec)
        same_vocabulary(load_tokenizer(path), encoder.tokenizer, spec, "losses.rtd.generator")
        generator = load_masked_lm(path, "the rtd loss's generator", "predicts the replaced tokens with")
        where = f"losses.rtd.generator: {spec}"  # it reads the model's ids, and its predictions are the model's
        check_vocabulary(encoder.tokenizer, generator.get_input_embeddings().num_embeddings, where, "embedding rows",
                         ConfigError)
        predicts = generator.get_output_embeddings().out_features
        if predicts > encoder.backbone.get_input_embeddings().num_embeddings:
            raise ConfigError(f"{where}: predicts {predicts} token ids, and the model trained has "
                              f"{encoder.backbone.get_input_embeddings().num_embeddings} embedding rows: its "
                              "predictions would index past them; use a generator of the model's vocabulary")
        self.__dict__["generator"] = generator.requires_grad_(False)
        model = copy.deepcopy(encoder.backbone)
        if getattr(model, "pooler", None) is not None:
            model.pooler.requires_grad_(False)  # unused: no gradient for DDP to wait for
        return ConditionedDiscriminator(model, encoder.backbone.config.hidden_size)

    def forward(self, views, context: LossContext):
        encoder = getattr(context.model, "module", context.model)
        values = []
        for name, input_ids, attention_mask, masked, _ in masked_views(context, self.views["views"],
                                                                              self.params.mask_ratio):
            generated = self.rewrite(masked, attention_mask, encoder.tokenizer.cls_token_id)
            replaced = (generated != input_ids) & attention_mask.bool()
            logits = context.model(generated * attention_mask, attention_mask, auxiliary=self.attached,
                                   condition=context.encoded[name][0])
            values.append(L.replaced_token_detection(logits, replaced))
        return torch.cat(values) if values else encoder.empty().sum(dim=1)

    @torch.no_grad()
    def rewrite(self, masked: torch.Tensor, attention_mask: torch.Tensor, first: int) -> torch.Tensor:
        """The generator's most likely token at every position, the first position's set to ``first``."""
        if self.generator is None:
            raise ConfigError(f"loss rtd: its generator {self.params.generator} is loaded when the run is set up "
                              "(auxiliary)")
        generator = self.generator.to(masked.device).train(self.params.generator_dropout and self.training)
        predicted = generator(input_ids=masked, attention_mask=attention_mask).logits.argmax(-1)
        predicted[:, 0] = first
        return predicted
