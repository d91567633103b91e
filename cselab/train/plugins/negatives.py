"""Generated negatives (simcse-improvements.txt section 4.3): extra InfoNCE columns made from the
anchors' vectors rather than from more sentences. All are detached: they are points to push
away from, not paths for the gradient.

Each kind is a ``negatives`` plug-in (:mod:`cselab.registry`), a
:class:`~cselab.train.plugins.kinds.NegativeSource` declared below with its parameters; ``docs/presets.md`` lists them.
A source keeps its state (queue, history, VAE weights) in its ``state_dict()`` (extra state), so that a resumed
run continues with it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from cselab.registry import REQUIRED, register, setting
from cselab.train.plugins.kinds import NegativeSource


def gaussian_samples(anchors: torch.Tensor, count: int, mean: str | float = "batch", std: str | float = "batch"
                     ) -> torch.Tensor:
    """``count`` samples of a per-dimension normal whose mean and std are the batch's (``"batch"``) or numbers."""
    anchors = anchors.detach()
    mu = anchors.mean(dim=0) if mean == "batch" else torch.full_like(anchors[0], float(mean))
    sigma = anchors.std(dim=0) if std == "batch" else torch.full_like(anchors[0], float(std))
    return mu + sigma * torch.randn(count, anchors.shape[1], device=anchors.device, dtype=anchors.dtype)


def covariance_samples(anchors: torch.Tensor, count: int, ridge: float = 1e-4) -> torch.Tensor:
    """``count`` samples of N(batch mean, batch covariance + ridge I): correlated dimensions stay correlated."""
    anchors = anchors.detach().float()
    centred = anchors - anchors.mean(dim=0)
    covariance = centred.T @ centred / max(len(anchors) - 1, 1)
    factor = torch.linalg.cholesky(covariance + ridge * torch.eye(len(covariance), device=anchors.device))
    return anchors.mean(dim=0) + torch.randn(count, anchors.shape[1], device=anchors.device) @ factor.T


class _VAE(nn.Module):
    def __init__(self, dim: int, hidden: int = 128, latent: int = 32):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, 2 * latent))
        self.decoder = nn.Sequential(nn.Linear(latent, hidden), nn.GELU(), nn.Linear(hidden, dim))
        self.latent = latent

    def loss(self, x: torch.Tensor) -> torch.Tensor:
        mu, log_var = self.encoder(x).chunk(2, dim=1)
        z = mu + torch.randn_like(mu) * (0.5 * log_var).exp()
        reconstruction = ((self.decoder(z) - x) ** 2).sum(dim=1).mean()
        return reconstruction - 0.5 * (1 + log_var - mu ** 2 - log_var.exp()).sum(dim=1).mean()


class _Counted(NegativeSource):
    @dataclass(frozen=True, kw_only=True)
    class Params(NegativeSource.Params):
        count: int = setting(64, "negatives per batch", min=1)


@register("negatives", "memory_bank")
class MemoryBank(_Counted):
    """The anchors of the previous steps (a queue of ``count``)."""

    def generate(self, anchors, past):
        return past[-self.params.count:] if past is not None else None

    def remember(self, anchors):
        self.memory.append(anchors.cpu())
        while sum(len(m) for m in self.memory) - len(self.memory[0]) >= self.params.count:
            self.memory.pop(0)


@register("negatives", "queue")
class Queue(NegativeSource):
    """A FIFO queue of the ``size`` newest vectors of ``view`` from earlier batches (ESimCSE's momentum contrast):
    this batch's are queued after its loss, the oldest dropped. Each process queues its own rows."""

    view_params = ("view",)

    @dataclass(frozen=True, kw_only=True)
    class Params(NegativeSource.Params):
        size: int = setting(160, "vectors kept: the newest, across batches (ESimCSE's neg_size)", min=1)
        view: str = setting(REQUIRED, "the view whose vectors are queued (a momentum view: views.NAME.frozen "
                            "with encoder.momentum)")

    def kept(self, anchors, context):
        return context.encoded[self.params.view][0]

    def generate(self, anchors, past):
        return past

    def remember(self, vectors):
        self.memory = [torch.cat([*self.memory, vectors.cpu()])[-self.params.size:]]


@register("negatives", "anchor_noise")
class AnchorNoise(NegativeSource):
    """Each anchor plus N(0, the batch's per-dimension std)."""

    def generate(self, anchors, past):
        return anchors + torch.randn_like(anchors) * anchors.std(dim=0, keepdim=True)


@register("negatives", "gaussian")
class Gaussian(_Counted):
    """Samples of N(mean, std) per dimension, each the batch's or a number."""

    @dataclass(frozen=True, kw_only=True)
    class Params(_Counted.Params):
        mean: float | str = setting("batch", "the batch's mean, or a number", words=("batch",))
        std: float | str = setting("batch", "the batch's std, or a number", words=("batch",))

    def generate(self, anchors, past):
        return gaussian_samples(anchors, self.params.count, self.params.mean, self.params.std)


@register("negatives", "covariance")
class Covariance(_Counted):
    """Samples of N(mu, Sigma) with the batch's full covariance (plus ``ridge`` I)."""

    @dataclass(frozen=True, kw_only=True)
    class Params(_Counted.Params):
        ridge: float = setting(1e-4, "added to the diagonal", min=0.0)

    def generate(self, anchors, past):
        return covariance_samples(anchors, self.params.count, self.params.ridge).to(anchors.dtype)


class _FromHistory(_Counted):
    """A source fitted on the anchors of the last ``history`` steps (none before the second step)."""

    @dataclass(frozen=True, kw_only=True)
    class Params(_Counted.Params):
        history: int = setting(8, "past batches of anchors kept", min=1)

    def remember(self, anchors):
        self.memory.append(anchors.cpu())
        if len(self.memory) > self.params.history:
            self.memory.pop(0)


@register("negatives", "gmm")
class GMM(_FromHistory):
    """Samples of a diagonal Gaussian mixture fitted on the last ``history`` steps' anchors."""

    @dataclass(frozen=True, kw_only=True)
    class Params(_FromHistory.Params):
        components: int = setting(4, "mixture components", min=1)

    def generate(self, anchors, past):
        if past is None:
            return None
        from sklearn.mixture import GaussianMixture

        mixture = GaussianMixture(min(self.params.components, len(past)), covariance_type="diag", max_iter=20,
                                  random_state=int(torch.randint(0, 2**31 - 1, ()).item()))
        mixture.fit(past.float().numpy())
        return torch.from_numpy(mixture.sample(self.params.count)[0]).float().to(anchors.device, anchors.dtype)


@register("negatives", "vae")
class VAE(_FromHistory):
    """Samples of a small VAE trained a few steps per batch on the last ``history`` steps' anchors."""

    @dataclass(frozen=True, kw_only=True)
    class Params(_FromHistory.Params):
        vae_steps: int = setting(10, "VAE training steps per batch", min=1)

    def __init__(self, params: Params):
        super().__init__(params)
        # the VAE and its own optimizer, made at the first history (when the vectors' width is known); its state is
        # the source's extra state, not a submodule's
        self.fitted: tuple[_VAE, torch.optim.Optimizer] | None = None

    def generate(self, anchors, past):
        if past is None:
            return None
        vae, optimizer = self.fitted or self._make(past.shape[1])
        vae.to(past.device)
        with torch.enable_grad():
            for _ in range(self.params.vae_steps):
                optimizer.zero_grad()
                vae.loss(past.float()).backward()
                optimizer.step()
        with torch.no_grad():
            samples = vae.decoder(torch.randn(self.params.count, vae.latent, device=past.device))
        return samples.to(anchors.dtype)

    def _make(self, dim: int) -> tuple[_VAE, torch.optim.Optimizer]:
        vae = _VAE(dim)
        self.fitted = vae, torch.optim.Adam(vae.parameters(), lr=1e-3)
        return self.fitted

    def get_extra_state(self):
        fitted = self.fitted is not None
        return {**super().get_extra_state(), "vae": self.fitted[0].state_dict() if fitted else None,
                "vae_optimizer": self.fitted[1].state_dict() if fitted else None}

    def set_extra_state(self, state):
        super().set_extra_state(state)
        self.fitted = None
        if state["vae"] is not None:
            vae, optimizer = self._make(self.memory[0].shape[1])
            vae.load_state_dict(state["vae"])
            optimizer.load_state_dict(state["vae_optimizer"])
