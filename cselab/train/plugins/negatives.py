"""Generated negatives (simcse-improvements.txt section 4.3): extra InfoNCE columns made from the
anchors' vectors rather than from more sentences. All are detached: they are points to push
away from, not paths for the gradient.

Each kind is a ``negatives`` plug-in (:mod:`cselab.registry`), declared below with its parameters;
``docs/train.md`` lists them.

A generator keeps its state (queue, history, VAE weights) in ``state_dict()`` so that a resumed
run continues with it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from cselab.registry import Param, check, get, register


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


COUNT = Param(int, 64, "negatives per batch", min=1)
HISTORY = Param(int, 8, "past batches of anchors kept", min=1)


@register("negatives", "memory_bank", params={"count": COUNT}, needs=("queue",))
def memory_bank(generator: NegativeGenerator, anchors: torch.Tensor, past: torch.Tensor | None):
    """The anchors of the previous steps (a queue of ``count``)."""
    return past[-generator.params["count"]:] if past is not None else None


@register("negatives", "anchor_noise")
def anchor_noise(generator: NegativeGenerator, anchors: torch.Tensor, past: torch.Tensor | None):
    """Each anchor plus N(0, the batch's per-dimension std)."""
    return anchors + torch.randn_like(anchors) * anchors.std(dim=0, keepdim=True)


@register("negatives", "gaussian", params={
    "count": COUNT, "mean": Param((float, str), "batch", "the batch's mean, or a number", words=("batch",)),
    "std": Param((float, str), "batch", "the batch's std, or a number", words=("batch",))})
def gaussian(generator: NegativeGenerator, anchors: torch.Tensor, past: torch.Tensor | None):
    """Samples of N(mean, std) per dimension, each the batch's or a number."""
    params = generator.params
    return gaussian_samples(anchors, params["count"], params["mean"], params["std"])


@register("negatives", "covariance", params={"count": COUNT, "ridge": Param(float, 1e-4, "added to the "
                                                                            "diagonal", min=0.0)})
def covariance(generator: NegativeGenerator, anchors: torch.Tensor, past: torch.Tensor | None):
    """Samples of N(mu, Sigma) with the batch's full covariance (plus ``ridge`` I)."""
    return covariance_samples(anchors, generator.params["count"], generator.params["ridge"]).to(anchors.dtype)


@register("negatives", "gmm", params={"count": COUNT, "history": HISTORY,
                                      "components": Param(int, 4, "mixture components", min=1)},
          needs=("history",))
def gmm(generator: NegativeGenerator, anchors: torch.Tensor, past: torch.Tensor | None):
    """Samples of a diagonal Gaussian mixture fitted on the last ``history`` steps' anchors."""
    return None if past is None else generator.gmm(past).to(anchors.device, anchors.dtype)


@register("negatives", "vae", params={"count": COUNT, "history": HISTORY,
                                      "vae_steps": Param(int, 10, "VAE training steps per batch", min=1)},
          needs=("history",))
def vae(generator: NegativeGenerator, anchors: torch.Tensor, past: torch.Tensor | None):
    """Samples of a small VAE trained a few steps per batch on the last ``history`` steps' anchors."""
    return None if past is None else generator.vae_samples(past).to(anchors.dtype)


class NegativeGenerator:
    """Makes a batch's generated negatives with a ``negatives`` plug-in and remembers what it needs from past
    batches (a queue of anchors, or the last ``history`` batches)."""

    def __init__(self, kind: str, **params):
        self.plugin = get("negatives", kind, "generated.kind")
        self.params = check(params, self.plugin.schema(), f"generated ({kind})")
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
        result = self.plugin.function(self, anchors, past)
        self._remember(anchors)
        return result

    def _remember(self, anchors: torch.Tensor) -> None:
        if "queue" in self.plugin.needs:
            self.memory.append(anchors.cpu())
            while sum(len(m) for m in self.memory) - len(self.memory[0]) >= self.params["count"]:
                self.memory.pop(0)
        elif "history" in self.plugin.needs:
            self.memory.append(anchors.cpu())
            if len(self.memory) > self.params["history"]:
                self.memory.pop(0)

    def gmm(self, past: torch.Tensor) -> torch.Tensor:
        from sklearn.mixture import GaussianMixture

        components = min(self.params["components"], len(past))
        mixture = GaussianMixture(components, covariance_type="diag", max_iter=20,
                                  random_state=int(torch.randint(0, 2**31 - 1, ()).item()))
        mixture.fit(past.float().numpy())
        return torch.from_numpy(mixture.sample(self.params["count"])[0]).float()

    def vae_samples(self, past: torch.Tensor) -> torch.Tensor:
        device = past.device
        if self.vae is None:
            self.vae = _VAE(past.shape[1])
            self.vae_optimizer = torch.optim.Adam(self.vae.parameters(), lr=1e-3)
        self.vae.to(device)
        with torch.enable_grad():
            for _ in range(self.params["vae_steps"]):
                self.vae_optimizer.zero_grad()
                self.vae.loss(past.float()).backward()
                self.vae_optimizer.step()
        with torch.no_grad():
            return self.vae.decoder(torch.randn(self.params["count"], self.vae.latent, device=device))

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
