"""Generated negatives (simcse-improvements.txt section 4.3): extra InfoNCE columns made from the
anchors' vectors rather than from more sentences. All are detached: they are points to push
away from, not paths for the gradient.

=================  ====================================================================
kind               the ``count`` extra negatives of a batch
=================  ====================================================================
memory_bank        the anchors of the previous steps (a queue of ``count``)
anchor_noise       each anchor plus N(0, the batch's per-dimension std)
gaussian           samples of N(mean, std) per dimension, ``mean``/``std`` from the batch
                   (``batch``) or fixed (``mean: 0``, ``std: 1``): N(mu,sigma), N(0,1), N(mu,1), N(0,sigma)
covariance         samples of N(mu, Sigma) with the batch's full covariance (plus ``ridge`` I)
gmm                samples of a Gaussian mixture (diagonal) fitted on the last ``history`` steps' anchors
vae                samples of a small VAE trained a few steps per batch on the last ``history`` steps' anchors
=================  ====================================================================

A generator keeps its state (queue, history, VAE weights) in ``state_dict()`` so that a resumed
run continues with it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

KINDS = ("memory_bank", "anchor_noise", "gaussian", "covariance", "gmm", "vae")


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


class NegativeGenerator:
    """Makes a batch's generated negatives and remembers what it needs from past batches."""

    def __init__(self, kind: str, count: int = 64, mean: str | float = "batch", std: str | float = "batch",
                 ridge: float = 1e-4, history: int = 8, components: int = 4, vae_steps: int = 10):
        if kind not in KINDS:
            raise ValueError(f"Unknown generated negatives {kind!r}; choose one of {', '.join(KINDS)}")
        self.kind, self.count, self.mean, self.std, self.ridge = kind, count, mean, std, ridge
        self.history, self.components, self.vae_steps = history, components, vae_steps
        self.memory: list[torch.Tensor] = []  # past anchors, newest last
        self.vae: _VAE | None = None
        self.vae_optimizer: torch.optim.Optimizer | None = None
        self._batch: tuple[torch.Tensor | None] | None = None

    def new_batch(self) -> None:
        """The next call makes (and remembers) a new batch's negatives; until then, calls return the same ones (a
        step that encodes its batch twice, as FGSM, SAM and AWP do, sees one set)."""
        self._batch = None

    def __call__(self, anchors: torch.Tensor) -> torch.Tensor | None:
        """The negatives for this batch (None when a history-based kind has no history yet); then remembers
        ``anchors``."""
        if self._batch is None:
            self._batch = (self._generate(anchors.detach()),)
        return self._batch[0]

    def _generate(self, anchors: torch.Tensor) -> torch.Tensor | None:
        past = torch.cat(self.memory).to(anchors.device) if self.memory else None
        if self.kind == "memory_bank":
            result = past[-self.count:] if past is not None else None
        elif self.kind == "anchor_noise":
            result = anchors + torch.randn_like(anchors) * anchors.std(dim=0, keepdim=True)
        elif self.kind == "gaussian":
            result = gaussian_samples(anchors, self.count, self.mean, self.std)
        elif self.kind == "covariance":
            result = covariance_samples(anchors, self.count, self.ridge).to(anchors.dtype)
        elif self.kind == "gmm":
            result = None if past is None else self._gmm(past).to(anchors.device, anchors.dtype)
        else:
            result = None if past is None else self._vae(past).to(anchors.dtype)
        self._remember(anchors)
        return result

    def _remember(self, anchors: torch.Tensor) -> None:
        self.memory.append(anchors.cpu())
        if self.kind == "memory_bank":
            while sum(len(m) for m in self.memory) - len(self.memory[0]) >= self.count:
                self.memory.pop(0)
        elif len(self.memory) > self.history:
            self.memory.pop(0)

    def _gmm(self, past: torch.Tensor) -> torch.Tensor:
        from sklearn.mixture import GaussianMixture

        components = min(self.components, len(past))
        mixture = GaussianMixture(components, covariance_type="diag", max_iter=20,
                                  random_state=int(torch.randint(0, 2**31 - 1, ()).item()))
        mixture.fit(past.float().numpy())
        return torch.from_numpy(mixture.sample(self.count)[0]).float()

    def _vae(self, past: torch.Tensor) -> torch.Tensor:
        device = past.device
        if self.vae is None:
            self.vae = _VAE(past.shape[1])
            self.vae_optimizer = torch.optim.Adam(self.vae.parameters(), lr=1e-3)
        self.vae.to(device)
        with torch.enable_grad():
            for _ in range(self.vae_steps):
                self.vae_optimizer.zero_grad()
                self.vae.loss(past.float()).backward()
                self.vae_optimizer.step()
        with torch.no_grad():
            return self.vae.decoder(torch.randn(self.count, self.vae.latent, device=device))

    def state_dict(self) -> dict[str, Any]:
        return {"memory": self.memory,
                "vae": self.vae.state_dict() if self.vae is not None else None,
                "vae_optimizer": self.vae_optimizer.state_dict() if self.vae_optimizer is not None else None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.memory = list(state["memory"])
        if state["vae"] is not None:
            self.vae = _VAE(self.memory[0].shape[1])
            self.vae.load_state_dict(state["vae"])
            self.vae_optimizer = torch.optim.Adam(self.vae.parameters(), lr=1e-3)
            self.vae_optimizer.load_state_dict(state["vae_optimizer"])
