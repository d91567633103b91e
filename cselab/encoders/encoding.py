"""How text becomes a vector: one checked type and its rules.

:class:`EncodingSettings` holds what a method's training and the checkpoint it leaves share (the pooler, the prompt and
how it is tokenised, the tokens pooled, the attention, the denoising, the head, lowercasing), with every rule between
them in :meth:`EncodingSettings.rules`; :class:`Encoding` adds what a trained encoder settles at test (a sentence's
token budget and the vectors' normalisation). :class:`~cselab.encoders.transformer.TransformerEncoder` takes an
:class:`Encoding` whole; a method's ``encoder`` section (:class:`~cselab.train.config.sections.EncoderConfig`) extends
:class:`EncodingSettings` with what training alone reads; a checkpoint's ``cselab.json``
(:class:`~cselab.encoders.checkpoint.CheckpointInfo`) is an :class:`Encoding` with its lineage. A new setting is one
field here and its use in the encoder: the training config, the checkpoint, its schema and docs follow.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from cselab.encoders import pooling  # (its import registers the poolers: pooler's choices)
from cselab.errors import ConfigError
from cselab.encoders.prepending import PLACEHOLDER
from cselab.registry import REQUIRED, Checked, Param, get, setting

#: The pooler of a plain transformers model that names none (a sentence-transformers stack names its own).
DEFAULT_POOLER = "avg"
MASK_PLACEHOLDER = "[MASK]"
EOS_PLACEHOLDER = "[EOS]"
#: Which tokens the pooler reads: every real token, or (echo embeddings) the sentence's last copy and what follows it.
POOL_TOKENS = ("all", "last_copy")
#: Poolers that read the pooled tokens (the others read one fixed position, which ``last_copy`` cannot move).
SPAN_POOLERS = ("avg", "last", "weighted_mean", "max")
#: How a sentence is written before it is tokenised (:func:`written_as`).
SENTENCE_FORMS = ("as_is", "prompteol")


@dataclass(frozen=True, kw_only=True)
class EncodingSettings(Checked):
    """How text becomes a vector, as training and the checkpoint it leaves share it (see the module docstring)."""

    pooler: str = setting(REQUIRED, "how token states become the sentence vector", choices="plugin:pooler")
    prompt: str | None = setting(None, "template with {} for the sentence ([MASK]: the tokenizer's mask token, "
                                 "[EOS]: its end-of-sequence token)")
    prompt_pieces: bool = setting(False, "PromptBERT's training rows: the template's two sides and the sentence "
                                  "tokenised apart and joined as ids (with a byte-level BPE such as RoBERTa's the "
                                  "sentence's first word then has no leading space); a method's checkpoints encode "
                                  "the filled template as text, as its evaluation.py")
    pool_tokens: str = setting("all", "the tokens the pooler reads: all (every real token) or last_copy (echo "
                               "embeddings: the sentence's last copy in a prompt that holds {} twice, and the "
                               "template after it)", choices=POOL_TOKENS)
    bidirectional: bool = setting(False, "lift a decoder LM's causal mask: every token attends to every real "
                                  "token of its row (LLM2Vec)")
    denoise: bool = setting(False, "PromptBERT's template denoising: each [MASK] vector less that of its "
                            "template encoded alone, at the positions the template has around a sentence of that "
                            "length (pooler mask); a method's checkpoints encode without unless denoise_at_test")
    head: dict[str, Any] | None = setting(None, "a head over the pooled vector, {kind: NAME, ...its parameters} "
                                          "(a method's encoder.head also takes a NAME alone); a method applies it in "
                                          "training, and at test with head_at_test (a checkpoint keeps a head of kind "
                                          "mlp or mlm_transform)")
    head_before_denoise: bool = setting(False, "the [MASK] vector and the template's each go through the head "
                                        "before the subtraction, head(h) - head(t) (PromptBERT's supervised BERT run, "
                                        "--mask_embedding_sentence_org_mlp); else head(h - t)")
    lowercase: bool = setting(False, "each sentence lowercased before it is tokenised (the prompt as written; "
                              "sentence-transformers' do_lower_case)")

    def rules(self) -> None:
        """Every rule between the settings: the pooler and the prompt, the prompt's pieces, the tokens pooled,
        the denoising and the head around it."""
        if self.pooler == "mask" and not self.prompt:
            raise ConfigError(f"{self.at('pooler')}: mask reads the prompt's [MASK] token; give a prompt template, "
                              "e.g. 'This sentence : \"{}\" means [MASK] .'")
        if self.prompt is not None:
            check_prompt(self.prompt, self.pooler, self.prompt_pieces, self.at("prompt"))
        if self.prompt_pieces and not self.prompt:
            raise ConfigError(f"{self.at('prompt_pieces')}: a template tokenised in pieces needs a prompt")
        check_pool_tokens(self.pool_tokens, self.pooler, self.prompt, self.at("pool_tokens"))
        if self.denoise and self.pooler != "mask":
            raise ConfigError(f"{self.at('denoise')}: template denoising subtracts the template's own [MASK] vector; "
                              "it needs pooler mask and a prompt")
        if self.head_before_denoise and not (self.denoise and self.head):
            raise ConfigError(f"{self.at('head_before_denoise')}: the template's vector goes through the head "
                              "before it is subtracted; it needs denoise and a head")


@dataclass(frozen=True, kw_only=True)
class Encoding(EncodingSettings):
    """How an encoder turns text into a vector (:class:`EncodingSettings`), with its token budget and
    normalisation."""

    max_length: int | None = setting(None, "a sentence's budget: without a prompt, its tokens with the special "
                                     "ones; with one, its own word-pieces (the template's on top); longer sentences "
                                     "are cut; null: as many as the model takes", min=1)
    normalize: bool = setting(False, "vectors scaled to unit length")
    sentence_form: str = setting("as_is", "how each sentence is written before the template takes it: as_is, or "
                                 "prompteol (PromptEOL's evaluation: a final '.' where it ends in none of . ? \" ', "
                                 "its double quotes made single, a final ? made .)", choices=SENTENCE_FORMS)
    layer: int | None = setting(None, "the hidden state the pooler reads, an index of the model's hidden states (0: "
                                "the embeddings; the last: the final layer's output after its norm; negative: from "
                                "the end); null: the last")
    token_prepending: list[int] | None = setting(
        None, "Token Prepending's [start, stop): before each decoder layer from start up to stop, the template's "
        f"{PLACEHOLDER} token (once, before the sentence) reads the sentence's last token's state",
        items=Param(int, min=0), length=2)

    def rules(self) -> None:
        super().rules()
        if self.sentence_form != "as_is" and not self.prompt:
            raise ConfigError(f"{self.at('sentence_form')}: {self.sentence_form} writes a sentence as it goes into a "
                              "template; give a prompt")
        if self.layer is not None and self.denoise:
            raise ConfigError(f"{self.at('layer')}: template denoising subtracts the last layer's template vector; "
                              "it reads no other layer")
        if self.layer is not None and not pooling.pools_last_layer(self.pooler):
            raise ConfigError(f"{self.at('layer')}: pooler {self.pooler!r} reads several layers or the model's pooler "
                              "output, not one layer's states; give a pooler of one layer (avg, last, mask, "
                              "cls_before_pooler, weighted_mean)")
        if self.token_prepending is not None:
            start, stop = self.token_prepending
            if start >= stop:
                raise ConfigError(f"{self.at('token_prepending')}: [{start}, {stop}) holds no layer; give start < stop")
            if not self.prompt or self.prompt.count(PLACEHOLDER) != 1 or \
                    self.prompt.index(PLACEHOLDER) > self.prompt.index("{}"):
                raise ConfigError(f"{self.at('token_prepending')}: the prompt must hold {PLACEHOLDER} once, before the "
                                  f"sentence, e.g. 'This sentence : {PLACEHOLDER} \"{{}}\" means in one word:\"'")


def written_as(sentences: list[str], form: str) -> list[str]:
    """``sentences`` written in ``form`` (:data:`SENTENCE_FORMS`): as they are, or as PromptEOL's evaluation writes
    them into its template (kongds/scaling_sentemb evaluation.py, 8567aa0, lines 198-200; Yibin-Lei/MetaEOL
    evaluation.py, c62096d, lines 142-144)."""
    if form == "as_is":
        return list(sentences)
    written = []
    for sentence in sentences:
        if sentence and sentence[-1] not in ".?\"'":
            sentence += "."
        sentence = sentence.replace('"', "'")
        written.append(sentence[:-1] + "." if sentence.endswith("?") else sentence)
    return written


#: The names of the settings of :class:`Encoding`, in order.
ENCODING_FIELDS = tuple(f.name for f in fields(Encoding))


def check_prompt(prompt: str, pooler: str, pieces: bool, where: str = "prompt") -> None:
    """A template's own rules: ``{}`` where the sentence goes (more than once only for poolers that read a span,
    and not in pieces), and with pooler mask exactly one ``[MASK]``."""
    copies = prompt.count("{}")
    if copies == 0:
        raise ConfigError(f"{where}: {prompt!r} must contain '{{}}', where the sentence goes")
    if copies > 1 and (pieces or pooler == "mask"):
        raise ConfigError(f"{where}: {prompt!r}: the sentence more than once goes with neither prompt_pieces nor "
                          "pooler 'mask' (each reads one copy)")
    if pooler == "mask" and prompt.count(MASK_PLACEHOLDER) != 1:
        raise ConfigError(f"{where}: {prompt!r} must contain {MASK_PLACEHOLDER} exactly once (pooler mask)")


def check_pool_tokens(pool_tokens: str, pooler: str, prompt: str | None, where: str = "pool_tokens") -> None:
    """``pool_tokens`` refused in one line where the pooler or the prompt cannot take it."""
    if pool_tokens == "last_copy":
        if not prompt or prompt.count("{}") < 2:
            raise ConfigError(f"{where}: last_copy pools the sentence's last copy: the prompt must hold {{}} at least "
                              f"twice (echo's template), not {prompt!r}")
        if get("pooler", pooler).cls.layer_pooler not in SPAN_POOLERS:
            raise ConfigError(f"{where}: last_copy: pooler {pooler!r} reads one fixed token; use one of "
                              f"{', '.join(p for p in SPAN_POOLERS if p != 'max')}")
