"""Sentence encoder over any Hugging Face transformer, with a pooler and an optional prompt."""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections import deque
from collections.abc import Callable
from dataclasses import fields, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, overload

import numpy as np
import torch
from tqdm.auto import tqdm

from cselab import progress
from cselab.background import ahead
from cselab.encoders.base import Encoder
from cselab.encoders.cuts import clean_cut, cuts_as_text, template_sides
from cselab.encoders.encoding import DEFAULT_POOLER, EOS_PLACEHOLDER, MASK_PLACEHOLDER, Encoding, written_as
from cselab.encoders.packing import forward as packed_forward
from cselab.encoders.packing import pack, padded_augment
from cselab.encoders.pooling import ModelOutput, Pooler, pool_states
from cselab.encoders.prepending import add_placeholder, decoder_layers, prepending
from cselab.encoders.pretrained import token_limit
from cselab.errors import ConfigError
from cselab.registry import build, get

if TYPE_CHECKING:
    from torch.nn.attention.flex_attention import BlockMask
    from transformers import PreTrainedTokenizerBase

#: What ``forward_batch``'s ``input_augment`` is: the word embeddings (batch, tokens, dim) to what the model reads.
Augment = Callable[[torch.Tensor], torch.Tensor]
AHEAD = 4  # batches padded (and pinned) in the background ahead of the forward passes
LAG = 8  # batches whose vectors are on their way back from a CUDA device before the host waits for the oldest
#: The settings :meth:`TransformerEncoder.describe` shows whatever their value (the others where not their default).
ALWAYS_DESCRIBED = ("pooler", "prompt", "max_length", "normalize")


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def check_device(device: str) -> str:
    """``device`` when this machine has it; a ConfigError saying what is there otherwise."""
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError):
        raise ConfigError(f"--device {device!r}: not a device; expected cpu, cuda or cuda:N") from None
    if parsed.type == "cuda" and not torch.cuda.is_available():
        build = "built without CUDA" if torch.version.cuda is None else "no GPU visible"
        raise ConfigError(f"--device {device}: no CUDA device here (torch {torch.__version__}, {build}); use "
                          "--device cpu")
    if parsed.type == "cuda" and parsed.index is not None and parsed.index >= torch.cuda.device_count():
        raise ConfigError(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s), "
                          f"cuda:0 to cuda:{torch.cuda.device_count() - 1}")
    return device


def inference_dtype(device: str, dtype: str = "auto") -> torch.dtype:
    """``auto``: bf16 on a GPU that supports it, fp16 on other GPUs, fp32 on CPU."""
    if dtype != "auto":
        return {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
    if not str(device).startswith("cuda"):
        return torch.float32
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


class TransformerEncoder(Encoder):
    """Encodes with a transformers model as an :class:`~cselab.encoders.encoding.Encoding` says (its pooler,
    :mod:`cselab.encoders.pooling`; its prompt; its budget ...); ``settings`` are that type's fields, given instead
    of it or over it (the pooler :data:`~cselab.encoders.encoding.DEFAULT_POOLER` unless given).

    ``prompt`` is a template such as ``This sentence : "{}" means [MASK] .``; ``{}`` receives
    the sentence and ``[MASK]`` stands for the tokenizer's mask token. ``max_length`` is the budget
    of a sentence: without a prompt, its tokens with the special ones (as SimCSE's max length);
    with a prompt, as PromptBERT, the sentence's own word-pieces, cut first and then wrapped in the
    template (whose tokens come on top, within the model's positions). Longer sentences are cut and
    a warning says how many. ``prompt_pieces``: the template's two sides and the sentence are tokenised
    apart and joined as ids (the side before the sentence stripped of spaces), as PromptBERT's released
    training code builds its rows; a byte-level BPE (RoBERTa's) then reads the sentence's first word
    without its leading space, where the filled text would give it one.

    ``[EOS]`` in a template stands for the tokenizer's end-of-sequence token. A template with ``{}`` more than once
    (echo embeddings) gets the sentence at each, and is tokenised as echo's released parser does: each template piece
    and each copy apart, joined as ids between the tokenizer's own special tokens; ``max_length`` is then each copy's
    budget. ``pool_tokens="last_copy"`` pools only the sentence's last copy and the template after it.
    ``bidirectional`` lifts a decoder LM's causal mask (LLM2Vec): every token attends to every real token of its row,
    through transformers' own bidirectional mask for the model's attention implementation.

    ``head`` (the module of the encoding's head, :mod:`cselab.encoders.heads`) maps every vector; with ``denoise``,
    the template's vector is subtracted before it, or with ``head_before_denoise`` each goes through it first
    (PromptBERT's supervised BERT run: ``head(h) - head(t)``).
    """

    model: Any  # a transformers model (in its adapter's wrapper where training has one): its config read by name
    template_ids: list[int]  # with denoise: the template alone, and how many of its tokens come before the sentence
    _before_sentence: int

    def __init__(self, model: Any, tokenizer: PreTrainedTokenizerBase, encoding: Encoding | None = None, *,
                 head: torch.nn.Module | None = None, spec: str = "", **settings: Any) -> None:
        if encoding is None:
            encoding = Encoding(**{"pooler": DEFAULT_POOLER, **settings})
        elif settings:
            encoding = replace(encoding, **settings)
        if (head is None) != (encoding.head is None):
            raise ConfigError(f"head: the encoding names {encoding.head or 'none'} and the head module given is "
                              f"{'none' if head is None else type(head).__name__}; give both or neither")
        self.encoding, self.head = encoding, head
        self._pool: Pooler = build(get("pooler", encoding.pooler, "pooler"), {})
        self.model = model.eval()
        self.tokenizer = tokenizer
        if encoding.bidirectional:
            check_bidirectional(model)
        self.spec = spec or getattr(model.config, "_name_or_path", "")
        self.limit = token_limit(model.config, tokenizer)  # tokens the model takes
        if encoding.max_length is not None and encoding.max_length > self.limit:
            raise ConfigError(f"max_length {encoding.max_length}: more than the {self.limit} tokens "
                              f"{self.spec or 'the model'} takes (its position embeddings or tokenizer limit); give "
                              f"at most {self.limit}")
        self.max_length = encoding.max_length or self.limit
        self.pieces: tuple[list[int], list[int]] | None = None
        self.echo: tuple[list[int], list[list[int]], list[int]] | None = None
        if encoding.layer is not None:
            check_layer(encoding.layer, model.config.num_hidden_layers, self.spec)
        # Token Prepending: its placeholder a token of the tokenizer and a row of the embeddings before any is read
        self.placeholder = add_placeholder(model, tokenizer) if encoding.token_prepending else None
        depth = len(decoder_layers(model)) if encoding.token_prepending else 0
        if encoding.token_prepending and encoding.token_prepending[1] > depth:
            raise ConfigError(f"token_prepending {encoding.token_prepending}: {self.spec or 'the model'} has {depth} "
                              "decoder layers; give a stop of at most that")
        self.prompt = self._check_prompt(encoding.prompt, encoding.prompt_pieces) if encoding.prompt else None
        if encoding.denoise and self.pieces is not None:  # the template alone: its two sides (checked to be its ids)
            self.template_ids, self._before_sentence = self.pieces[0] + self.pieces[1], len(self.pieces[0])
        elif encoding.denoise and self.prompt is not None:  # (Encoding gives denoise a prompt) the template alone,
            # and how many of its tokens come before the sentence: once, not per batch; as PromptBERT's evaluation.py
            # get_delta: a space for the sentence, a run of three spaces made one, the side before the sentence counted
            # stripped (a byte-level BPE reads spaces; WordPiece does not)
            before = self.prompt.split("{}")[0]
            self.template_ids = self.tokenizer(self.prompt.replace("{}", " ").replace("   ", " ").strip())["input_ids"]
            self._before_sentence = len(self.tokenizer(before.strip())["input_ids"]) - 1

    @property
    def pooler(self) -> str:
        return self.encoding.pooler

    @property
    def pool_tokens(self) -> str:
        return self.encoding.pool_tokens

    @property
    def bidirectional(self) -> bool:
        return self.encoding.bidirectional

    @property
    def denoise(self) -> bool:
        return self.encoding.denoise

    @property
    def head_before_denoise(self) -> bool:
        return self.encoding.head_before_denoise

    @property
    def normalize(self) -> bool:
        return self.encoding.normalize

    def _sides(self, prompt: str) -> tuple[list[int], list[int]]:
        """The (filled) template's ids before the sentence (the start token and the stripped text before ``{}``)
        and after it (the text after ``{}`` and the end token), each tokenised alone. Refused, as the released code
        asserts (train.py 793-794), where the tokenizer does not wrap a text in one start and one end token, or
        where the two sides tokenised together give other ids (the template pass of denoising reads those)."""
        where = f"prompt_pieces: {self.spec or 'the tokenizer'}"
        empty = self.tokenizer("")["input_ids"]
        inner = self.tokenizer("a", add_special_tokens=False)["input_ids"]
        if len(empty) != 2 or self.tokenizer("a")["input_ids"] != [empty[0], *inner, empty[1]]:
            raise ConfigError(f"{where} does not wrap a text in one start and one end token, which the pieces are "
                              "cut at")
        before, after = prompt.split("{}")
        sides = self.tokenizer(before.strip())["input_ids"][:-1], self.tokenizer(after)["input_ids"][1:]
        if self.tokenizer(before.strip() + after)["input_ids"] != sides[0] + sides[1]:
            raise ConfigError(f"{where} tokenises the template {prompt!r} otherwise where its two sides meet than "
                              "apart; put a space on either side of {}")
        return sides

    def _check_prompt(self, prompt: str, pieces: bool = False) -> str:
        """The template filled with the tokenizer's own tokens, refused where the tokenizer lacks one it names or
        where it leaves no room for a sentence (the template's own rules are the encoding's)."""
        if EOS_PLACEHOLDER in prompt:
            if self.tokenizer.eos_token is None:
                raise ConfigError(f"prompt {prompt!r}: {EOS_PLACEHOLDER} stands for the end-of-sequence token, which "
                                  "the tokenizer has not")
            prompt = prompt.replace(EOS_PLACEHOLDER, self.tokenizer.eos_token)
        mask_token = self.tokenizer.mask_token
        if self.pooler == "mask" and mask_token is None:
            raise ConfigError("pooler 'mask' needs a tokenizer with a mask token")
        filled = prompt.replace(MASK_PLACEHOLDER, mask_token) if mask_token else prompt
        self._mask_after_sentence = filled.find(mask_token or "\0") > filled.index("{}")
        if pieces:
            self.pieces = self._sides(filled)
            self._template_length = len(self.pieces[0]) + len(self.pieces[1])
        elif prompt.count("{}") > 1:
            self.echo = self._echo_pieces(filled)
            self._template_length = len(self.echo[0]) + sum(map(len, self.echo[1])) + len(self.echo[2])
        else:
            self._template_length = len(self.tokenizer(filled.replace("{}", ""))["input_ids"])
        if self._template_length >= self.limit:
            raise ConfigError(f"prompt {prompt!r} leaves no room for a sentence within the model's {self.limit} "
                             "positions")
        return filled

    def _echo_pieces(self, filled: str) -> tuple[list[int], list[list[int]], list[int]]:
        """Echo's rows: the ids the tokenizer puts before a text, each template piece's ids (tokenised apart, no
        special tokens) and those it puts after a text; a sentence's copies go between the pieces."""
        bare = self.tokenizer("a", add_special_tokens=False)["input_ids"]
        wrapped = self.tokenizer("a")["input_ids"]
        starts = [i for i in range(len(wrapped) - len(bare) + 1) if wrapped[i:i + len(bare)] == bare]
        if not starts:
            raise ConfigError(f"prompt {filled!r}: {self.spec or 'the tokenizer'} does not keep a text's own ids "
                              "between its special tokens, which the sentence's copies are placed by")
        texts = [self.tokenizer(text, add_special_tokens=False)["input_ids"] if text else []
                 for text in filled.split("{}")]
        return wrapped[:starts[0]], texts, wrapped[starts[0] + len(bare):]

    @property
    def copies(self) -> int:
        """How many times the template holds the sentence."""
        return len(self.echo[1]) - 1 if self.echo else 1

    def pool_mask(self, attention_mask: torch.Tensor) -> torch.Tensor:
        """The tokens the pooler reads: the real ones, or with ``pool_tokens="last_copy"`` each row's last copy of
        the sentence and the template after it (rows padded on the right, the copies of equal length)."""
        if self.pool_tokens == "all":
            return attention_mask
        assert self.echo is not None  # check_pool_tokens: last_copy only with {} twice, an echo template
        lengths = attention_mask.sum(dim=1, keepdim=True)
        sentence = (lengths - self._template_length) // self.copies
        start = lengths - len(self.echo[1][-1]) - len(self.echo[2]) - sentence
        index = torch.arange(attention_mask.shape[1], device=attention_mask.device)
        return attention_mask * (index >= start)

    def run(self, model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, packed: bool = False,
            **kwargs: Any) -> ModelOutput:
        """``model``'s outputs on a padded batch, bidirectional when the encoder is: every forward pass of a
        sentence goes through here. ``packed``: its real tokens run as one row, the outputs padded back
        (:mod:`cselab.encoders.packing`)."""
        if packed and self.placeholder is not None:
            raise ConfigError("token_prepending: a packed pass holds several sentences in one row; it runs padded")
        packing = pack(model, input_ids, attention_mask, self.bidirectional) if packed else None
        if packing is not None:
            return packed_forward(model, input_ids, packing, **kwargs)
        mask: torch.Tensor | BlockMask | None = attention_mask
        if self.bidirectional:
            from transformers.masking_utils import create_bidirectional_mask

            embeds = torch.empty((*input_ids.shape, 0), device=input_ids.device,
                                 dtype=next(model.parameters()).dtype)
            kwargs["position_ids"] = torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
            mask = create_bidirectional_mask(config=model.config, inputs_embeds=embeds, attention_mask=attention_mask,
                                             allow_is_bidirectional_skip=False)
        if self.placeholder is None or self.encoding.token_prepending is None:
            return model(input_ids=input_ids, attention_mask=mask, **kwargs)
        start, stop = self.encoding.token_prepending
        with prepending(decoder_layers(model), start, stop, input_ids, attention_mask, self.placeholder):
            return model(input_ids=input_ids, attention_mask=mask, **kwargs)

    @property
    def dim(self) -> int:
        hidden: int = self.model.config.hidden_size
        return hidden

    @property
    def device(self) -> torch.device:
        device: torch.device = next(self.model.parameters()).device
        return device

    def describe(self) -> dict[str, Any]:
        """The encoding's settings (those of :data:`ALWAYS_DESCRIBED`, and every other one where it differs from its
        default) as applied: the template filled with the tokenizer's tokens, the head's class, the resolved budget
        and what it counts; then the weights' dtype."""
        applied = {"prompt": self.prompt, "head": type(self.head).__name__, "max_length": self.max_length}
        settings: dict[str, Any] = {}
        for field in fields(Encoding):
            value = getattr(self.encoding, field.name)
            if field.name in ALWAYS_DESCRIBED or value != field.default:
                settings[field.name] = applied.get(field.name, value)
            if field.name == "max_length":
                settings["max_length_counts"] = ("the sentence's word-pieces (the prompt on top)" if self.prompt
                                                 else "tokens, special ones included")
        return {**super().describe(), **settings, "dtype": str(next(self.model.parameters()).dtype)}

    def _fill(self, sentence: str) -> str:
        return self.prompt.replace("{}", sentence, 1) if self.prompt else sentence

    @property
    def sentence_budget(self) -> int:
        """Word-pieces a sentence keeps inside the prompt (each copy's): ``max_length``, less what the model's
        positions lack."""
        return min(self.max_length, (self.limit - self._template_length) // self.copies)

    def tokenize(self, sentences: list[str], warn: bool = True) -> list[list[int]]:
        """Token ids with special tokens (and the prompt); a sentence over its budget is cut at a token boundary
        (a warning counts the cut ones). Where :mod:`cselab.encoders.cuts` finds the tokenizer's own truncation and
        the template's joined ids the same as cutting and filling the text, one tokenizer call (:meth:`_cut_ids`);
        elsewhere the text is cut and tokenised again (:meth:`_cut_texts`)."""
        sentences = written_as([s.lower() for s in sentences] if self.encoding.lowercase else list(sentences),
                               self.encoding.sentence_form)
        if self.pieces is not None or self.echo:  # the sentence's ids cut, between the template's
            pieces = self._ids(sentences, add_special_tokens=False)
            n_cut = sum(len(row) > self.sentence_budget for row in pieces)
            if n_cut and warn:
                warnings.warn(f"{n_cut} sentence(s) longer than max_length={self.max_length} word-pieces were "
                              "truncated", stacklevel=3)
            if self.pieces is not None:  # PromptBERT's training rows
                before, after = self.pieces
                return [before + row[:self.sentence_budget] + after for row in pieces]
            if self.echo:  # echo: special tokens, then the pieces with a copy between each two
                return [_echo_row(self.echo, row[:self.sentence_budget]) for row in pieces]
        sides = self._one_call
        if sides is not None and (self.prompt or self.max_length >= self.tokenizer.num_special_tokens_to_add()):
            ids, n_cut = self._cut_ids(sentences, sides)
        else:  # (and where max_length leaves no room for the special tokens)
            ids, n_cut = self._cut_texts(sentences)
        if n_cut and warn:
            warnings.warn(f"{n_cut} sentence(s) longer than max_length={self.max_length} "
                          f"{'word-pieces' if self.prompt else 'tokens'} were truncated", stacklevel=3)
        return ids

    @cached_property
    def _one_call(self) -> tuple[list[int], list[int]] | None:
        """Where one tokenizer call cuts the sentences as :meth:`_cut_texts` would (:mod:`cselab.encoders.cuts`): the
        ids a template puts before and after a sentence's own (the special tokens with them), where they join as the
        filled text's; without a prompt nothing (the tokenizer adds its special tokens). None elsewhere. Asked once,
        at the first :meth:`tokenize`."""
        if not cuts_as_text(self.tokenizer):
            return None
        return template_sides(self.tokenizer, self.prompt) if self.prompt else ([], [])

    def _cut_ids(self, sentences: list[str], sides: tuple[list[int], list[int]]) -> tuple[list[list[int]], int]:
        """Each sentence's ids cut to its budget by the tokenizer in one call (with a prompt: its own ids, joined
        between ``sides``), and how many were cut; a row whose cut splits a character's pieces
        (:func:`~cselab.encoders.cuts.clean_cut`) is :meth:`_cut_texts`' instead."""
        budget = self.sentence_budget if self.prompt else self.max_length
        batch = self.tokenizer(sentences, add_special_tokens=not self.prompt, truncation=True, max_length=budget,
                               verbose=False, return_attention_mask=False, return_token_type_ids=False)
        encodings = batch.encodings or []
        ids: list[list[int]] = batch["input_ids"]
        cut = [i for i, row in enumerate(ids) if len(row) == budget and encodings[i].overflowing]
        if self.prompt:
            before, after = sides
            ids = [before + row + after for row in ids]
        unclean = [i for i in cut if not clean_cut(encodings[i])]
        if unclean:
            for i, row in zip(unclean, self._cut_texts([sentences[i] for i in unclean])[0]):
                ids[i] = row
        return ids, len(cut)

    def _cut_texts(self, sentences: list[str]) -> tuple[list[list[int]], int]:
        """Each sentence's ids, cut as text at a token boundary (with a prompt: to its word-piece budget, then filled
        in), and how many were cut. Each stage is one batched tokenizer call, however many are cut."""
        sentences = list(sentences)
        if self.prompt:  # PromptBERT: cut the sentence to its budget, then wrap it
            pieces = self._ids(sentences, add_special_tokens=False)
            too_long = [i for i, row in enumerate(pieces) if len(row) > self.sentence_budget]
            for i, cut in zip(too_long, self._cut([sentences[i] for i in too_long], self.sentence_budget)):
                sentences[i] = cut
            cap = self.limit
        ids = self._ids([self._fill(s) for s in sentences])
        if not self.prompt:
            too_long, cap = [i for i, row in enumerate(ids) if len(row) > self.max_length], self.max_length
        over = [i for i, row in enumerate(ids) if len(row) > cap]  # a template can re-tokenize the edges
        for i, row in zip(over, self._truncate([sentences[i] for i in over], [len(ids[i]) - cap for i in over], cap)):
            ids[i] = row
        return ids, len(too_long)

    def _ids(self, texts: list[str], add_special_tokens: bool = True) -> list[list[int]]:
        """The token ids of ``texts`` in one batched call, nothing else asked of the tokenizer (no attention mask or
        token types: a third of a batch call's time, read back from the Rust tokenizer into lists)."""
        ids: list[list[int]] = self.tokenizer(texts, add_special_tokens=add_special_tokens, verbose=False,
                                              return_attention_mask=False, return_token_type_ids=False)["input_ids"]
        return ids

    def _offsets(self, sentences: list[str]) -> list[list[tuple[int, int]]]:
        """Each sentence's word-pieces as character spans (no special tokens), in one batched call."""
        if not sentences:
            return []
        encoded = self.tokenizer(sentences, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        spans: list[list[tuple[int, int]]] = encoded["offset_mapping"]
        return spans

    def _cut(self, sentences: list[str], keep: int) -> list[str]:
        """Each sentence up to the end of its ``keep``-th word-piece."""
        return [_prefix(s, spans, keep) for s, spans in zip(sentences, self._offsets(sentences))]

    def _truncate(self, sentences: list[str], excess: list[int], cap: int) -> list[list[int]]:
        """Cut each sentence (never the prompt) at a token boundary until the whole fits in ``cap`` tokens. A cut that
        leaves a sentence as it was (a character that is several tokens, whose span each of them carries, as a
        byte-level BPE spells a rare character) cuts one token more the next time."""
        sentences, excess = list(sentences), list(excess)
        done: dict[int, list[int]] = {}
        pending = list(range(len(sentences)))
        while pending:
            spans = self._offsets([sentences[i] for i in pending])
            cuts = [_prefix(sentences[i], s, max(len(s) - excess[i], 0)) for i, s in zip(pending, spans)]
            rows = self._ids([self._fill(c) for c in cuts])
            still = []
            for i, cut, row in zip(pending, cuts, rows):
                if len(row) <= cap:
                    done[i] = row
                else:
                    excess[i] = excess[i] + 1 if cut == sentences[i] else len(row) - cap
                    sentences[i] = cut
                    still.append(i)
            pending = still
        return [done[i] for i in range(len(sentences))]

    def pad(self, rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Token id rows padded to the longest (right padding), and their attention mask."""
        width = max(len(row) for row in rows)
        input_ids = np.full((len(rows), width), self.tokenizer.pad_token_id or 0, dtype=np.int64)
        attention_mask = np.zeros((len(rows), width), dtype=np.int64)
        for r, row in enumerate(rows):
            input_ids[r, : len(row)] = row
            attention_mask[r, : len(row)] = 1
        return torch.from_numpy(input_ids), torch.from_numpy(attention_mask)

    def mask_positions(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Each row's position of the prompt's mask token (the one after the sentence when the template has it
        there)."""
        hits = input_ids == self.tokenizer.mask_token_id
        index = torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
        if self._mask_after_sentence:
            return torch.where(hits, index, -1).max(dim=1).values
        return torch.where(hits, index, input_ids.shape[1]).min(dim=1).values

    @overload
    def forward_batch(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, model: Any = None,
                      layers: None = None, layer_pooler: str | None = None, input_augment: Augment | None = None,
                      head: torch.nn.Module | None | str = "own", packed: bool = False) -> torch.Tensor: ...

    @overload
    def forward_batch(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, model: Any = None, *,
                      layers: list[int] | str, layer_pooler: str | None = None, input_augment: Augment | None = None,
                      head: torch.nn.Module | None | str = "own", packed: bool = False
                      ) -> tuple[torch.Tensor, torch.Tensor]: ...

    def forward_batch(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, model: Any = None,
                      layers: list[int] | str | None = None, layer_pooler: str | None = None,
                      input_augment: Augment | None = None, head: torch.nn.Module | None | str = "own",
                      packed: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Pooled vectors of a padded batch already on the model's device: the one forward path of inference and
        training. ``model`` runs instead of the encoder's own (training's frozen copy); ``input_augment`` maps
        the word embeddings (batch, tokens, dim) to what the model reads instead; ``head`` maps the vectors instead
        of the encoder's own (None: no head). With ``layers`` (hidden-state indices, 0 = embeddings, negative from
        the last; or ``"all"``) it returns ``(vectors, layer_vectors)``, the second of shape (batch, layers, dim),
        each layer pooled with ``layer_pooler`` (by default the one matching the pooler), neither through a head.
        ``packed``: the pass runs packed (:meth:`run`; ``input_augment`` still maps the padded embeddings, its draws
        the padded pass's: :func:`~cselab.encoders.packing.padded_augment`); the denoising's template pass is
        padded."""
        model = self.model if model is None else model
        head = self.head if isinstance(head, str) else head
        if layers is not None and head is not None:
            raise ConfigError("pooled layers go through no head: give head=None and map them yourself")
        positions = self.mask_positions(input_ids) if "mask" in (self.pooler, layer_pooler) else None
        hook = model.get_input_embeddings().register_forward_hook(
            lambda module, inputs, output: padded_augment(input_augment, output)) if input_augment is not None else None
        try:
            outputs = self.run(model, input_ids, attention_mask, packed, output_hidden_states=layers is not None or
                               self._pool.hidden_states or self.encoding.layer is not None)
        finally:
            if hook is not None:
                hook.remove()
        pooled = self.pool_mask(attention_mask)
        vectors = self._pool(outputs, pooled, positions) if self.encoding.layer is None else pool_states(
            outputs.hidden_states[self.encoding.layer], pooled, self._pool.layer_pooler, positions)
        if self.denoise:
            template = self.template_vectors(model, attention_mask.sum(dim=1) - len(self.template_ids))
            if self.head_before_denoise and head is not None:
                vectors, head = head(vectors) - head(template), None
            else:
                vectors = vectors - template
        if layers is None:
            return vectors if head is None else head(vectors)
        hidden = outputs.hidden_states
        kind = layer_pooler or self._pool.layer_pooler
        chosen = range(len(hidden)) if layers == "all" else layers
        return vectors, torch.stack([pool_states(hidden[k], pooled, kind, positions) for k in chosen], dim=1)

    def template_vectors(self, model: Any, lengths: torch.Tensor) -> torch.Tensor:
        """PromptBERT's template denoising: for each row, the [MASK] vector of the template encoded alone, its
        tokens after the sentence at the positions they have in a row whose sentence is ``lengths[i]`` word-pieces
        long (one pass over the distinct lengths, in the model's mode: with its gradient and dropout in training)."""
        ids = torch.tensor(self.template_ids, device=lengths.device)  # [CLS] this sentence : " " means [MASK] . [SEP]
        before = self._before_sentence  # [CLS] and the template's tokens before {}
        distinct, row_of = torch.unique(lengths, return_inverse=True)
        positions = torch.arange(len(ids), device=lengths.device).repeat(len(distinct), 1)
        positions[:, before:] += distinct.unsqueeze(1)
        rows = ids.repeat(len(distinct), 1)  # the mask given: without one, transformers >= 5.25 reads the positions'
        # jump over the sentence as two packed sequences that cannot attend each other
        outputs = model(input_ids=rows, attention_mask=torch.ones_like(rows), position_ids=positions)
        mask = self.mask_positions(ids.unsqueeze(0))[0]
        vectors: torch.Tensor = outputs.last_hidden_state[:, mask][row_of]
        return vectors

    def _encode_unique(self, sentences: list[str], batch_size: int, show_progress_bar: bool | None) -> np.ndarray:
        return self.encode_ids(self.tokenize(sentences), batch_size, show_progress_bar)

    def encode_ids(self, ids: list[list[int]], batch_size: int = 64, show_progress_bar: bool | None = False
                   ) -> np.ndarray:
        """Vectors of already tokenized sentences, in batches of them sorted by token count (longest first, all of
        them: the batches, so the vectors, are those of any other call), each padded to its longest member. On a CUDA
        device a background thread pads and pins the batches :data:`AHEAD` ahead of the forward passes, each goes over
        without a wait and its vectors come back while the next ones run (:class:`ReadBack`). On the CPU the forward
        passes are the host's own work, which a thread would only compete with: each batch is padded before its pass.
        """
        order = np.argsort([-len(row) for row in ids], kind="stable")
        batches = [order[start:start + batch_size] for start in range(0, len(order), batch_size)]
        if progress.active():  # a probe suite's bar counts them
            show = False
        else:
            show = len(batches) > 20 and sys.stderr.isatty() if show_progress_bar is None else show_progress_bar
        out = np.empty((len(ids), self.dim), dtype=np.float32)
        device = self.device
        read_back = ReadBack(out)

        def prepare(batch: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
            padded = self.pad([ids[i] for i in batch])
            return (padded[0].pin_memory(), padded[1].pin_memory()) if device.type == "cuda" else padded

        prepared = (ahead(batches, prepare, AHEAD) if pads_ahead(device)
                    else contextlib.nullcontext(map(prepare, batches)))
        # a model sharded for training (FSDP2) gathers its weights into buffers it reuses in the training steps, which
        # inference mode would make tensors no later step may write: no_grad there
        inference = torch.no_grad() if is_sharded(self.model) else torch.inference_mode()
        with inference, tqdm(total=len(batches), desc="Encoding", unit="batch", disable=not show) as bar, \
                prepared as ready:
            for batch, (input_ids, attention_mask) in zip(batches, ready, strict=True):
                vectors = self.forward_batch(input_ids.to(device, non_blocking=True),
                                             attention_mask.to(device, non_blocking=True))
                if self.normalize:
                    vectors = torch.nn.functional.normalize(vectors.float(), dim=-1)
                read_back.put(batch, vectors.float())
                progress.advance(len(batch))
                bar.update()
            read_back.finish()
        return out


class ReadBack:
    """Batches' vectors written into ``out`` at their rows: at once from the CPU; from a CUDA device copied without a
    wait into pinned memory and written :data:`LAG` batches later (or at :meth:`finish`), so that the copy overlaps the
    next batches' forward passes and the host waits for the device only that far behind."""

    def __init__(self, out: np.ndarray) -> None:
        self.out = out
        self.pending: deque[tuple[np.ndarray, torch.Tensor, torch.Event]] = deque()

    def put(self, rows: np.ndarray, vectors: torch.Tensor) -> None:
        if vectors.device.type != "cuda":
            self.out[rows] = vectors.cpu().numpy()
            return
        host = torch.empty(vectors.shape, dtype=vectors.dtype, pin_memory=True)
        host.copy_(vectors, non_blocking=True)
        copied = torch.Event(vectors.device)
        copied.record(torch.cuda.current_stream(vectors.device))  # after the copy
        self.pending.append((rows, host, copied))
        if len(self.pending) > LAG:
            self._write_oldest()

    def _write_oldest(self) -> None:
        rows, host, copied = self.pending.popleft()
        copied.synchronize()
        self.out[rows] = host.numpy()

    def finish(self) -> None:
        """Wait for the vectors still on their way and write them."""
        while self.pending:
            self._write_oldest()


def pads_ahead(device: torch.device) -> bool:
    """Whether :meth:`TransformerEncoder.encode_ids` pads its batches in a background thread: for a CUDA device."""
    return device.type == "cuda"


def is_sharded(model: Any) -> bool:
    """Whether ``model`` is sharded across processes (FSDP2's ``fully_shard``)."""
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def check_layer(layer: int, layers: int, spec: str) -> None:
    """Refuse a hidden-state index a model of ``layers`` layers has not (its ``layers + 1`` states: the
    embeddings, then each layer's output)."""
    if not -(layers + 1) <= layer <= layers:
        raise ConfigError(f"layer {layer}: {spec or 'the model'} has {layers + 1} hidden states (the embeddings and "
                          f"{layers} layers): give {-(layers + 1)} to {layers}")


def check_bidirectional(model: Any) -> None:
    """Refuse a model whose attention cannot take the 4-D mask a bidirectional pass gives it."""
    implementation = getattr(model.config, "_attn_implementation", None) or "eager"
    if implementation not in ("eager", "sdpa"):
        raise ConfigError(f"bidirectional attention: the model runs {implementation!r} attention, which takes no "
                          "4-D mask; load it with attn_implementation 'sdpa' or 'eager'")


def _echo_row(echo: tuple[list[int], list[list[int]], list[int]], sentence: list[int]) -> list[int]:
    """An echo template's row: its ids before, its pieces with a copy of ``sentence`` between each two, the ids
    after."""
    before, texts, after = echo
    row = before + texts[0]
    for text in texts[1:]:
        row = row + sentence + text
    return row + after


def _prefix(sentence: str, spans: list[tuple[int, int]], keep: int) -> str:
    """The sentence up to the end of its ``keep``-th word-piece (``spans``: its word-pieces' character spans)."""
    return sentence[: spans[keep - 1][1]] if keep > 0 else ""
