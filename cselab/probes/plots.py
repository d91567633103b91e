"""Pictures the suites draw of their sections (PNG, matplotlib's Agg back-end): accuracy bars, geometry panels."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(figure, path: str | os.PathLike) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path)
    _pyplot().close(figure)
    return path


def plot_accuracies(accuracies: dict[str, float], path: str | os.PathLike, title: str = "") -> Path:
    """A bar chart of test accuracy x 100 per task."""
    plt = _pyplot()
    figure, ax = plt.subplots(figsize=(6, 4), dpi=120)
    bars = ax.bar(list(accuracies), list(accuracies.values()), color="tab:blue")
    ax.bar_label(bars, fmt="%.1f", fontsize=7)
    ax.set_ylim(0, 105)
    ax.set_ylabel("test accuracy x 100")
    ax.set_title(title, fontsize=9)
    ax.tick_params(axis="x", labelrotation=45, labelsize=8)
    return _save(figure, path)


def plot_geometry(geometry: dict[str, Any], path: str | os.PathLike, title: str = "") -> Path:
    """Alignment/uniformity, inter-layer cosine, TokSim, STS-B by layer x pooler and STS after PCA, one panel each,
    in a grid of two rows that stays readable at a page's width (about 1,200 pixels)."""
    plt = _pyplot()
    figure, grid = plt.subplots(2, 3, figsize=(12, 7.6), dpi=100)
    axes = grid.ravel()
    axes[5].set_axis_off()
    au = geometry["alignment_uniformity"]
    axes[0].scatter([au["alignment"]], [au["uniformity"]], s=40)
    axes[0].annotate(f"{au['alignment']:.3f}, {au['uniformity']:.3f}", (au["alignment"], au["uniformity"]),
                     xytext=(8, 8), textcoords="offset points", fontsize=9)  # beside the point, not over it
    axes[0].margins(0.3)
    axes[0].set(xlabel="alignment (lower is better)", ylabel="uniformity (lower is better)",
                title="Alignment / uniformity (STS-B dev)")
    layers = geometry["layers"]
    if "skipped" in layers:
        for ax in axes[1:4]:
            ax.text(0.5, 0.5, layers["skipped"], ha="center", va="center", wrap=True, fontsize=8)
            ax.set_axis_off()
    else:
        cosine = layers["inter_layer_cosine"]
        axes[1].plot([f"{i}-{i + 1}" for i in range(len(cosine))], cosine, marker="o")
        axes[1].set(xlabel="adjacent layers", ylabel="mean cosine", title="Inter-layer similarity (STS-B test)")
        axes[2].plot(range(len(layers["token_similarity"])), layers["token_similarity"], marker="o")
        axes[2].set(xlabel="layer", ylabel="mean token cosine", title="TokSim (STS-B test)")
        for pooler, values in layers["sts_by_layer"].items():
            axes[3].plot(range(len(values)), [float("nan") if v is None else v for v in values], marker="o",
                         label=pooler)
        axes[3].set(xlabel="layer (0 = embeddings)", ylabel="Spearman x 100", title="STS-B test by layer x pooler")
        axes[3].legend(fontsize=8)
    pca = geometry["pca"]
    if "skipped" in pca:
        axes[4].text(0.5, 0.5, pca["skipped"], ha="center", va="center", wrap=True, fontsize=8)
        axes[4].set_axis_off()
    else:
        dims = sorted(pca["dims"], key=int)
        axes[4].plot([int(d) for d in dims], [pca["dims"][d]["avg"] for d in dims], marker="o")
        axes[4].set(xlabel="dimensions kept (PCA)", ylabel="STS avg. Spearman x 100", title="STS after PCA")
    for ax in axes[:5]:
        ax.grid(alpha=0.3)
        ax.title.set_fontsize(11)
    figure.suptitle(title)
    return _save(figure, path)


def plot_widths(widths: list[int], scores: dict[str, list[float | None]], path: str | os.PathLike,
                title: str = "") -> Path:
    """Each main score (one panel each) against the width the vectors were cut to (``probe run --dims``)."""
    plt = _pyplot()
    columns = min(3, len(scores))
    rows = -(-len(scores) // columns)
    figure, grid = plt.subplots(rows, columns, figsize=(4 * columns, 3.2 * rows), dpi=100, squeeze=False)
    for ax, (label, values) in zip(grid.ravel(), scores.items()):
        points = [(w, v) for w, v in zip(widths, values) if v is not None]
        ax.plot([w for w, _ in points], [v for _, v in points], marker="o")
        ax.set_xscale("log", base=2)
        ax.set_xticks(widths, [str(w) for w in widths])
        ax.set(xlabel="width", title=label)
    for ax in grid.ravel()[len(scores):]:
        ax.set_axis_off()
    figure.suptitle(title, fontsize=9)
    return _save(figure, path)
