"""The contracts of the training plug-in kinds, one base class each: a loss is a :class:`Loss`, a source of generated
negatives a :class:`NegativeSource`, a change of a loss's similarities a :class:`LogitTransform`, a view's input or
output augmentation an :class:`Augment`, a view's token-level augmentation a :class:`TokenAugment`, a step's weight
perturbation a :class:`WeightHook`, a training head a :class:`Head`, a parameter-efficient adapter an :class:`Adapter`,
a change of a data column's texts a :class:`TextTransform`. Each declares its parameters as a nested ``Params`` (a
subclass of its kind's, :class:`cselab.registry.Params`) and is built once per run with one checked instance of it,
``self.params`` (:func:`cselab.registry.build`: a loss's view names and a head's ``hidden`` size follow as keywords),
so a plug-in owns its settings and its state; the module kinds' ``state_dict`` (extra state included) is saved with the
run and restored on resume. (Poolers, used by inference encoders too, have theirs in :mod:`cselab.encoders.pooling`.)

:func:`cselab.registry.register` refuses a plug-in that is not a subclass of its kind's base class.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from cselab import boundary
from cselab.registry import Param, contract
from cselab.registry import Params as PluginParams


@dataclass
class LossContext:
    """What a loss may read beside its views: every encoded view (``encoded``: name -> (vectors, rows)) and
    ``initial_weights()`` (current and initial parameters; given to losses with ``needs_initial_weights``)."""

    encoded: dict[str, tuple[torch.Tensor, list[int]]]
    initial_weights: Callable[[], tuple] | None = None
    #: a forward view's rows, token ids and attention mask (given to losses with ``needs_tokens``)
    tokens: Callable[[str], tuple] | None = None
    #: the training encoder (or its DDP wrapper), for losses with ``needs_tokens`` that run it themselves
    model: Any = None
    #: a forward view's texts, one per row it has (a teacher or a guide encodes them)
    texts: Callable[[str], list[str]] | None = None


REDUCTIONS = ("rows", "whole_batch", "replicated")


class Parametrized:
    """What every training kind's base class shares: its plug-ins' ``Params`` (none here: a plug-in declares its
    own as a nested subclass) and the constructor that keeps the one instance it is built with as ``self.params``
    (what else it is given goes on to the next base class: a head's module)."""

    @dataclass(frozen=True, kw_only=True)
    class Params(PluginParams):
        """No parameters."""

    def __init__(self, params: PluginParams, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.params: Any = params  # the subclass's own Params, which a base class cannot name


class Loss(Parametrized, nn.Module):
    """A loss plug-in (kind ``loss``).

    Class attributes declare how the objective feeds it: ``roles`` are parameters each naming a view (the views are
    handed to :meth:`forward` in this order, restricted to the rows that have all of them); ``view_lists`` are
    parameters naming lists of views the loss reads itself from ``context.encoded``; ``value_roles`` are parameters
    each naming a numeric column of the data (a scored pair's ``score``), handed to :meth:`forward` after the views as
    one float per row, for the same rows (a row without the value is left out as a row without a view), and those of
    ``optional_values`` may be null (no column read, nothing handed over); ``reduce`` says how its value reduces over
    processes (``rows``: one loss per row, averaged over every process's rows; ``whole_batch``: its views
    gathered from all processes first, then one number; ``replicated``: the same number on every process);
    ``needs_initial_weights`` asks for ``context.initial_weights``; ``needs_tokens`` for ``context.tokens`` and
    ``context.model``; ``needs_lm_head`` for an encoder with the model's language-model head (``"masked"``: its
    masked-LM head; ``"causal"``: a decoder's next-token head); ``needs_pooled`` for each view
    it reads also as ``NAME.pooled`` in ``context.encoded`` (its vectors before the training head); ``model_params``
    names the parameters that name a model (a generator, a teacher: their weights' sha256 joins the run's identity). The
    constructor takes the loss's ``Params`` (``self.params``) and the view names as keywords (``self.views``, role ->
    name). A loss with models of its own loads them in :meth:`auxiliary`, when the run is set up."""

    roles: ClassVar[tuple[str, ...]] = ()
    view_lists: ClassVar[tuple[str, ...]] = ()
    value_roles: ClassVar[tuple[str, ...]] = ()
    optional_values: ClassVar[tuple[str, ...]] = ()
    reduce: ClassVar[str] = "rows"
    needs_initial_weights: ClassVar[bool] = False
    needs_tokens: ClassVar[bool] = False
    needs_lm_head: ClassVar[str | None] = None
    needs_pooled: ClassVar[bool] = False
    model_params: ClassVar[tuple[str, ...]] = ()

    def __init__(self, params: PluginParams, **views: str | list[str]):
        super().__init__(params)
        self.views: dict[str, Any] = views  # a role's view name (str), a view list's names (list[str])
        self.attached: str | None = None  # the key of its trained auxiliary model in the encoder, once attached

    def auxiliary(self, encoder) -> nn.Module | None:
        """Load the loss's own models for the training ``encoder`` (a
        :class:`~cselab.train.model.TrainingEncoder`); return the one to train with it (attached as
        ``encoder.auxiliary[NAME]``, run through ``context.model(..., auxiliary=self.attached)``), or None. Frozen
        models stay outside the module's state (rebuilt from their spec). Nothing by default."""
        return None

    def __init_subclass__(cls, **kwargs):
        """A class declaring a ``reduce`` other than one of :data:`REDUCTIONS` is refused where it is defined."""
        super().__init_subclass__(**kwargs)
        if cls.reduce not in REDUCTIONS:
            raise TypeError(f"{cls.__qualname__}.reduce = {cls.reduce!r}: expected one of {', '.join(REDUCTIONS)}")
        stray = [role for role in cls.optional_values if role not in cls.value_roles]
        if stray:
            raise TypeError(f"{cls.__qualname__}.optional_values: {stray[0]!r} is none of its value_roles "
                            f"({', '.join(cls.value_roles) or 'none'})")

    @classmethod
    def view_schema(cls) -> dict[str, Param]:
        """The parameters that name views: one per role, a list per ``view_lists`` entry."""
        roles = {role: Param(str, help=f"the view read as {role}") for role in cls.roles}
        lists = {name: Param(list, [], items=Param(str), help="views whose vectors are extra negatives")
                 for name in cls.view_lists}
        return {**roles, **lists}

    @classmethod
    def value_schema(cls) -> dict[str, Param]:
        """The parameters that name numeric columns of the data: one per value role, the role's name by default (an
        optional one's: null, none read)."""
        return {role: Param(str, None, help=f"the data column of each row's {role} (a number), or null for none",
                            nullable=True) if role in cls.optional_values else
                Param(str, role, help=f"the data column of each row's {role} (a number)") for role in cls.value_roles}

    def prepare(self, views: list[torch.Tensor]) -> list[torch.Tensor]:
        """This process's views before they are gathered (``whole_batch``); as they are by default."""
        return views

    def forward(self, views: list[torch.Tensor], context: LossContext) -> torch.Tensor:
        raise NotImplementedError


class NegativeSource(Parametrized, nn.Module):
    """A source of generated negatives (kind ``negatives``): extra InfoNCE columns made from the anchors' vectors,
    detached (points to push away from, not paths for the gradient).

    A subclass implements :meth:`generate` and, to use past batches, :meth:`remember`; whatever it keeps in
    ``self.memory`` (tensors, newest last) resumes with the run (each process its own). What it remembers is the
    anchors, or, for a source whose parameter ``view`` (declared in ``view_params``) names a view, that view's
    vectors (a momentum encoder's, ESimCSE's queue). Within one step the source gives one set of negatives however
    often it is called (a step that encodes its batch twice, as FGSM, SAM and AWP do, sees one set);
    :meth:`new_batch` starts the next step."""

    #: parameters that name a view (checked against the method's views when the config resolves)
    view_params: ClassVar[tuple[str, ...]] = ()

    def __init__(self, params: PluginParams):
        super().__init__(params)
        self.memory: list[torch.Tensor] = []
        self._batch: tuple[torch.Tensor | None] | None = None

    def generate(self, anchors: torch.Tensor, past: torch.Tensor | None) -> torch.Tensor | None:
        """This batch's negatives from its (detached) ``anchors`` and the remembered ones (``past``, None when
        there are none); None for no negatives."""
        raise NotImplementedError

    def remember(self, anchors: torch.Tensor) -> None:
        """Keep what later batches need of ``anchors`` in ``self.memory``; nothing by default."""

    def new_batch(self) -> None:
        self._batch = None

    def kept(self, anchors: torch.Tensor, context: LossContext | None) -> torch.Tensor:
        """What :meth:`remember` is given: the anchors by default."""
        return anchors

    def forward(self, anchors: torch.Tensor, context: LossContext | None = None) -> torch.Tensor | None:
        if self._batch is None:
            anchors = anchors.detach()
            past = torch.cat(self.memory).to(anchors.device) if self.memory else None
            self._batch = (self.generate(anchors, past),)
            self.remember(self.kept(anchors, context).detach())
        return self._batch[0]

    def get_extra_state(self) -> dict[str, Any]:
        return {"memory": self.memory}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.memory = list(state["memory"])


class LogitTransform(Parametrized, nn.Module):
    """A change of a contrastive loss's similarities (kind ``logit_transform``, e.g. a margin): :meth:`forward`
    maps the cosine similarities (anchors x columns, before the temperature) and each row's positive column
    (``labels``) to new similarities of the same shape. A loss applies it where its config names one
    (``losses.info_nce.transform``).

    A transform with ``needs_reference`` (GISTEmbed's guide) also gets ``reference``: the same pairs' similarities by
    other vectors of the same sentences, which the loss computes from :meth:`reference_vectors` of each view's texts
    (so the loss reads its views' texts, as one with ``needs_tokens``); ``model_params`` names the parameters that
    name a model (its weights' sha256 joins the run's identity)."""

    needs_reference: ClassVar[bool] = False
    model_params: ClassVar[tuple[str, ...]] = ()

    def forward(self, similarities: torch.Tensor, labels: torch.Tensor,
                reference: torch.Tensor | None = None) -> torch.Tensor:
        raise NotImplementedError

    def prepare(self, encoder) -> None:
        """Note what it needs of the training ``encoder`` (a guide: the training length), when the run is set up;
        nothing by default."""

    def reference_vectors(self, texts: list[str], device: torch.device) -> torch.Tensor:
        """One vector per text, for the reference similarities (``needs_reference``)."""
        raise NotImplementedError(f"{type(self).__name__} takes no reference")


class Augment(Parametrized, nn.Module):
    """A view augmentation: of a forward view's word embeddings (kind ``input_augment``, before positions are
    added) or of another view's vectors (kind ``output_augment``). :meth:`forward` maps the values to augmented
    values of the same shape. With ``needs_gradient`` it also gets the gradient of the loss with respect to the
    values, and the objective encodes such a view twice per step (FGSM). ``per_token``: an input augment maps each
    token's values by themselves (each value's own draw), so that it maps a packed pass's embeddings (the batch's real
    tokens in one row, ``training.packing``) as it maps a padded pass's; one that draws along a row does not."""

    needs_gradient: ClassVar[bool] = False
    per_token: ClassVar[bool] = False

    def forward(self, values: torch.Tensor, gradient: torch.Tensor | None = None) -> torch.Tensor:
        raise NotImplementedError


class TokenAugment(Parametrized, nn.Module):
    """A token-level augmentation of a forward view (kind ``token_augment``, ESimCSE's word repetition):
    :meth:`forward` maps a right-padded batch's token ids and attention mask (and the tokenizer's padding id) to
    new ones, of any length; the view then has a forward pass of its own."""

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, pad_id: int
                ) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def longest(self, length: int) -> int:
        """The most tokens a row of ``length`` tokens can have after it (checked against the model's positions)."""
        raise NotImplementedError


class WeightHook(Parametrized, nn.Module):
    """A perturbation of the weights before a step's second forward-backward pass (kind ``weight_hook``, SAM/AWP):
    called with the trainable tensors that have a gradient, its ``forward`` moves them in place (under
    ``no_grad``); the trainer restores them exactly before the optimizer steps. A module of the objective, so that
    a hook with state (buffers) has it saved with the run and restored on resume."""

    def forward(self, with_grad: list[torch.Tensor]) -> None:
        raise NotImplementedError


class Head(Parametrized, nn.Module):
    """A head over the pooled vector (kind ``head``): built as ``cls(params, hidden=...)``, with ``hidden`` the
    backbone's hidden size; ``forward`` maps the pooled vectors. Checkpoints leave it out, unless
    ``encoder.head_at_test`` keeps one of the kinds :mod:`cselab.encoders.heads` can load."""


class TextTransform(Parametrized):
    """A change of a data column's texts before the training batch is tokenised (kind ``text``, the method's
    ``texts: {COLUMN: {kind: NAME, ...}}``): called with one text, returns the text the views of that column read
    (SNCSE's released training appends " ." where a sentence ends without punctuation). Stateless: the same text
    always gives the same result."""

    def __call__(self, text: str) -> str:
        raise NotImplementedError


class Adapter(Parametrized):
    """A parameter-efficient adapter (kind ``adapter``, ``encoder.adapter``): :meth:`load_options` are further
    keywords of the backbone's ``from_pretrained`` (a k-bit quantization config); :meth:`wrap` gives the backbone with
    the adapter's weights added and only those trainable (model names the backbone in errors); :meth:`merged` a plain
    backbone with them folded in, a copy (what a checkpoint holds), the trained one left as it is; :meth:`save` the
    adapter alone, as its library writes it (a checkpoint's ``adapter/`` too)."""

    def load_options(self) -> dict[str, Any]:
        return {}

    def wrap(self, backbone: nn.Module, model: str) -> nn.Module:
        raise NotImplementedError

    def merged(self, backbone: nn.Module) -> nn.Module:
        raise NotImplementedError

    def save(self, backbone: nn.Module, folder: str) -> None:
        """Write the adapter's own weights and settings into ``folder`` as its library writes them (a checkpoint's
        ``adapter/``), so that the library's own loader puts them back on the base."""
        raise NotImplementedError


# Each kind's work methods and what each returns, checked where a plug-in returns it (cselab.boundary).
contract("loss", Loss, {"forward": boundary.loss_value, "prepare": None})
contract("negatives", NegativeSource, {"generate": boundary.tensor(optional=True), "remember": None, "kept": None})
contract("logit_transform", LogitTransform, {"forward": boundary.tensor(shape_of=0)})
contract("input_augment", Augment, {"forward": boundary.tensor(shape_of=0)})
contract("output_augment", Augment, {"forward": boundary.tensor(shape_of=0)})
contract("token_augment", TokenAugment, {"forward": boundary.id_pair, "longest": None})
contract("weight_hook", WeightHook, {"forward": boundary.nothing})
contract("head", Head, {"forward": boundary.tensor(rows_of=0)})
contract("adapter", Adapter, {"wrap": boundary.instance(nn.Module, what="a torch module (the wrapped backbone)"),
                              "merged": boundary.instance(nn.Module, what="a torch module (the merged backbone)"),
                              "load_options": boundary.instance(dict, what="a dict of from_pretrained keywords"),
                              "save": None})
contract("text", TextTransform, {"__call__": boundary.text})
