"""A model's language-model heads with their trained weights: the masked-LM head (SimCSE's MLM auxiliary, DiffCSE's
generator, InfoCSE's aggregation) and a decoder's next-token layer (LLM2Vec's masked next-token prediction)."""

from __future__ import annotations

from torch import nn

from cselab.errors import ConfigError
from cselab.files import clipped


def _from_pretrained(auto, name_or_path: str, what: str, **config):
    """``(model, loading info)`` of the transformers Auto class ``auto``, its own report of missing weights silenced
    (the caller names them in one line); a ConfigError saying ``what`` needs it when transformers cannot build one."""
    from transformers.utils import logging as transformers_logging

    verbosity = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_error()
    try:
        return auto.from_pretrained(name_or_path, output_loading_info=True, **config)
    except Exception as err:  # an architecture without such a class, an unreadable folder, offline
        raise ConfigError(f"{name_or_path}: {what}, and transformers cannot build one from it "
                          f"({type(err).__name__}: {clipped(err)})") from None
    finally:
        transformers_logging.set_verbosity(verbosity)


def load_masked_lm(name_or_path: str, user: str, use: str, **config):
    """``AutoModelForMaskedLM`` of ``name_or_path`` (``config`` overriding its config's fields, e.g. fewer layers) with
    its masked-LM head's trained weights; a ConfigError naming the ``user`` (a loss) and what it needs them for
    (``use``) when transformers cannot build one or the weights lack the head (the packaged MiniLM)."""
    from transformers import AutoModelForMaskedLM

    masked, info = _from_pretrained(AutoModelForMaskedLM, name_or_path, f"{user} needs a masked-LM", **config)
    prefix = masked.base_model_prefix
    missing = [key for key in info["missing_keys"] if not key.startswith(prefix + ".")]
    if missing:
        raise ConfigError(f"{name_or_path}: has no masked-LM head weights ({missing[0]} and {len(missing) - 1} more "
                          f"missing), which {user} {use}; use a model that has them (bert-base-uncased, "
                          "roberta-base, distilbert-base-uncased)")
    return masked


def output_head(masked) -> nn.Module:
    """The module of a masked LM beside its base model: its masked-LM head (BERT's ``cls``, RoBERTa's ``lm_head``)."""
    return next(module for name, module in masked.named_children() if name != masked.base_model_prefix)


def load_causal_lm(name_or_path: str):
    """``AutoModelForCausalLM`` of ``name_or_path`` with its next-token layer's trained weights (or tied ones); a
    ConfigError naming the folder otherwise."""
    from transformers import AutoModelForCausalLM

    lm, info = _from_pretrained(AutoModelForCausalLM, name_or_path, "the mntp loss needs a causal LM")
    tied = getattr(lm.config, "tie_word_embeddings", False)
    head = [name for name, parameter in lm.named_parameters() if parameter is lm.get_output_embeddings().weight]
    if not tied and any(key in info["missing_keys"] for key in head):
        raise ConfigError(f"{name_or_path}: has no next-token head weights ({head[0]} missing), which the mntp loss "
                          "predicts masked tokens with; give the folder of the whole causal LM (its "
                          "...ForCausalLM weights), not of its base model")
    return lm


def load_lm_head(name_or_path: str, backbone, kind: str = "masked") -> nn.Module:
    """The LM head of ``name_or_path`` with its trained weights, its output layer tied to ``backbone``'s word
    embeddings where the model ties them: ``masked``, the module of ``AutoModelForMaskedLM`` beside its base model
    (BERT's ``cls``, RoBERTa's ``lm_head``); ``causal``, a decoder's next-token layer (``AutoModelForCausalLM``'s
    output embeddings). A ConfigError when the model has no such weights (the packaged MiniLM, a base model saved
    without its head)."""
    if kind == "causal":
        lm = load_causal_lm(name_or_path)
        head = lm.get_output_embeddings()
    else:
        lm = load_masked_lm(name_or_path, "the mlm loss", "trains with (or drop the loss)")
        head = output_head(lm)
    if getattr(lm.config, "tie_word_embeddings", False):
        lm.get_output_embeddings().weight = backbone.get_input_embeddings().weight
    return head
