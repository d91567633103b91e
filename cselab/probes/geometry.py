"""Representation geometry.

- Alignment and uniformity (Wang & Isola, 2020) of normalized sentence vectors, as SimCSE measures
  them: alignment ``E ||f(x) - f(y)||^2`` over positive pairs (STS-B pairs with gold >= 4),
  uniformity ``log E exp(-2 ||f(x) - f(y)||^2)`` over all pairs of distinct sentences. Lower is
  better for both.
- Per layer of a transformer, on the STS-B test sentences: the cosine of adjacent layers' sentence
  vectors (SSCL's inter-layer similarity, sscl.txt Eq. 2; each layer pooled as the encoder's pooler
  pools the last one), the mean cosine of distinct tokens within a sentence (TokSim, Eq. 1; special
  tokens left out), and STS-B test Spearman x 100 of every layer pooled by [CLS], mean and max
  (sg-opt.txt Figure 1). Layer 0 is the embedding layer.
- STS after PCA (sscl.txt Table 5): the STS suite's vectors projected on the principal components of
  the encoder's vectors of a reference corpus (the wiki1m sample under the data root), for each
  dimension below the encoder's own.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from cselab.data import corpus_path, load_sts, read_corpus
from cselab.document import Block, Formatted, Heading, Paragraph, Table, number
from cselab.encoders import Encoder
from cselab.errors import DataError
from cselab.evaluation.scoring import Result
from cselab.metrics import cosine_rows, spearman
from cselab.probes.plots import plot_geometry
from cselab.evaluation.sts import subset_limit
from cselab.probes.names import STS_SUITE
from cselab.probes.sts import SHORT_NAMES, STSTasks, sts_sets, x100
from cselab.probes.suite import ProbeOptions, Presenter, Score, Suite, register_suite

if TYPE_CHECKING:
    from cselab.encoders import TransformerEncoder

LAYER_GRID_POOLERS = {"cls": "first", "mean": "avg", "max": "max"}
PCA_DIMS = (768, 512, 256, 128)


def _normalized(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float64)
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def alignment(first: np.ndarray, second: np.ndarray, alpha: float = 2.0) -> float:
    """Mean ``||x_i - y_i||^alpha`` over pairs of rows, after normalization."""
    return float(np.mean(np.linalg.norm(_normalized(first) - _normalized(second), axis=1) ** alpha))


def uniformity(vectors: np.ndarray, t: float = 2.0) -> float:
    """``log`` of the mean of ``exp(-t ||x_i - x_j||^2)`` over pairs i < j, after normalization."""
    x = _normalized(vectors)
    squared = np.maximum(2.0 - 2.0 * (x @ x.T), 0.0)[np.triu_indices(len(x), k=1)]
    return float(np.log(np.mean(np.exp(-t * squared))))


def alignment_uniformity(encoder: Encoder, data_dir: str | os.PathLike | None = None, split: str = "dev",
                         threshold: float = 4.0) -> dict[str, Any]:
    """Alignment on the STS-B ``split`` pairs with gold >= ``threshold``, uniformity over all its sentences."""
    (pairs,) = load_sts("stsb", split, data_dir)
    sentences = list(dict.fromkeys(pairs.sentences1 + pairs.sentences2))
    vectors = encoder.encode(sentences)
    position = {text: i for i, text in enumerate(sentences)}
    positive = [i for i, score in enumerate(pairs.scores) if score >= threshold]
    first = vectors[[position[pairs.sentences1[i]] for i in positive]]
    second = vectors[[position[pairs.sentences2[i]] for i in positive]]
    return {"alignment": alignment(first, second), "uniformity": uniformity(vectors), "positive_pairs": len(positive),
            "sentences": len(sentences), "split": split}


def token_similarity(states: np.ndarray) -> float:
    """TokSim of one sentence: mean cosine over ordered pairs of distinct tokens of ``states`` (tokens, dim)."""
    x = _normalized(states)
    m = len(x)
    return float(((x @ x.T).sum() - np.trace(x @ x.T)) / (m * (m - 1)))


def layer_geometry(encoder: TransformerEncoder, sentences1: list[str], sentences2: list[str], scores: np.ndarray,
                   batch_size: int = 64) -> dict[str, Any]:
    """Inter-layer cosine, TokSim per layer and the layer x pooler STS grid on scored sentence pairs."""
    import torch  # torch and the poolers imported on use: --help imports no model library

    from cselab.encoders.pooling import matching_layer_pooler, pool_states

    sentences = list(dict.fromkeys(sentences1 + sentences2))
    ids = encoder.tokenize(sentences, warn=False)
    special = set(encoder.tokenizer.all_special_ids)
    own = matching_layer_pooler(encoder.pooler)
    pooled: dict[str, list[list[np.ndarray]]] = {name: [] for name in (*LAYER_GRID_POOLERS, "own")}
    toksim: list[list[float]] = []
    with torch.inference_mode():
        for start in range(0, len(ids), batch_size):
            input_ids, mask = encoder.pad(ids[start:start + batch_size])
            input_ids, mask = input_ids.to(encoder.device), mask.to(encoder.device)
            hidden = encoder.run(encoder.model, input_ids, mask, output_hidden_states=True).hidden_states
            positions = encoder.mask_positions(input_ids) if own == "mask" else None
            read = encoder.pool_mask(mask)  # the tokens the encoder pools (echo's last copy)
            for name, kind in (*LAYER_GRID_POOLERS.items(), ("own", own)):
                pooled[name].append([pool_states(h, read, kind, positions).float().cpu().numpy() for h in hidden])
            keep = mask.bool() & ~torch.isin(input_ids, torch.tensor(sorted(special), device=input_ids.device))
            for layer, h in enumerate(hidden):
                if len(toksim) <= layer:
                    toksim.append([])
                toksim[layer] += [token_similarity(h[r][keep[r]].float().cpu().numpy())
                                  for r in range(len(h)) if keep[r].sum() > 1]
    layers = {name: [np.concatenate([batch[layer] for batch in chunks]) for layer in range(len(chunks[0]))]
              for name, chunks in pooled.items()}
    position = {text: i for i, text in enumerate(sentences)}
    first = [position[t] for t in sentences1]
    second = [position[t] for t in sentences2]
    own_layers = layers.pop("own")
    return {
        "layers": len(own_layers) - 1,
        "inter_layer_cosine": [float(np.mean(cosine_rows(a, b))) for a, b in zip(own_layers, own_layers[1:])],
        "token_similarity": [float(np.mean(values)) for values in toksim],
        "sts_by_layer": {name: [x100(spearman(cosine_rows(v[first], v[second]), scores)) for v in vectors]
                         for name, vectors in layers.items()},
        "sentences": len(sentences),
    }


def pca_sts(train: np.ndarray, tasks: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]],
            dims: tuple[int, ...] = PCA_DIMS) -> dict[str, Any]:
    """Spearman x 100 per task and on average, with the vectors projected on the first ``d`` principal
    directions of ``train`` for each ``d`` below their size, and unprojected (``d`` = their size: the full
    projection is a rotation, which changes no cosine). ``tasks[name]`` = (first vectors, second vectors,
    gold scores)."""
    full = train.shape[1]
    if len(train) < full:
        raise DataError(f"PCA needs at least {full} reference vectors, got {len(train)}")
    reduced = sorted((d for d in dims if d < full), reverse=True)
    components = np.empty((full, 0))
    if reduced:  # the top eigenvectors of the covariance only: far cheaper than a full SVD for wide vectors
        centered = train - train.mean(axis=0)
        import scipy.linalg  # imported on use: --help imports no SciPy

        _, vectors = scipy.linalg.eigh(centered.T @ centered, subset_by_index=(full - reduced[0], full - 1))
        components = vectors[:, ::-1]
    result: dict[str, Any] = {}
    for d in [full, *reduced]:
        scores = {}
        for name, (a, b, gold) in tasks.items():
            if d < full:
                a, b = a @ components[:, :d], b @ components[:, :d]
            scores[name] = 100 * spearman(cosine_rows(a, b), gold)
        result[str(d)] = {**scores, "avg": float(np.mean(list(scores.values())))}
    return result


def run_geometry(encoder: Encoder, options: ProbeOptions, files: list, sts_tasks: Sequence[str] = STS_SUITE
                 ) -> dict[str, Any]:
    """Alignment/uniformity, the layer-wise measures (transformer encoders) and STS after PCA on ``sts_tasks``."""
    from cselab.encoders import TransformerEncoder  # its module imports torch

    result: dict[str, Any] = {"alignment_uniformity": alignment_uniformity(encoder, options.data_dir)}
    (test,) = subset_limit(load_sts("stsb", "test", options.data_dir), options.limit)
    files.extend(test.files)
    if isinstance(encoder, TransformerEncoder):
        result["layers"] = layer_geometry(encoder, test.sentences1, test.sentences2, test.scores, options.batch_size)
    else:
        result["layers"] = {"skipped": f"{type(encoder).__name__} has no layers (needs a transformer encoder)"}
    tasks = {SHORT_NAMES.get(key, key): subsets
             for key, subsets in sts_sets(sts_tasks, "test", options.data_dir, options.limit).items()}
    reference = corpus_path("wiki1m", options.data_dir)
    corpus = read_corpus(reference)
    if len(corpus) < encoder.dim:
        result["pca"] = {"skipped": f"{reference.name} has {len(corpus)} sentences, fewer than the {encoder.dim} "
                                    "dimensions to reduce"}
        return result
    sentences = [t for subsets in tasks.values() for s in subsets for t in (*s.sentences1, *s.sentences2)]
    unique = list(dict.fromkeys(sentences))
    vectors = dict(zip(unique, encoder.encode(unique, batch_size=options.batch_size)))
    pairs = {name: (np.stack([vectors[t] for s in subsets for t in s.sentences1]),
                    np.stack([vectors[t] for s in subsets for t in s.sentences2]),
                    np.concatenate([s.scores for s in subsets])) for name, subsets in tasks.items()}
    result["pca"] = {"reference": reference.name, "reference_sentences": len(corpus),
                     "dims": pca_sts(encoder.encode(corpus, batch_size=options.batch_size).astype(np.float64),
                                     pairs)}
    files.append(reference)
    files.extend(path for subsets in tasks.values() for s in subsets for path in s.files)
    return result


class GeometryPresenter(Presenter):
    """The geometry suite's section: alignment/uniformity, the layer-wise measures and STS after PCA, drawn."""

    def sections(self, section: dict[str, Any], spec: str) -> list[Block]:
        """Alignment/uniformity, the layer-wise measures and STS after PCA."""
        au, layers, pca = section["alignment_uniformity"], section["layers"], section["pca"]
        blocks: list[Block] = [
            Heading("Geometry"),
            Heading("Alignment and uniformity (STS-B dev, normalized vectors; lower is better)", 3),
            Table([number("Alignment", 3), number("Uniformity", 3), number("Positive pairs"), number("Sentences")],
                  [[au["alignment"], au["uniformity"], au["positive_pairs"], au["sentences"]]]),
            Heading("By layer (STS-B test; layer 0 = embeddings)", 3)]
        if "skipped" in layers:
            blocks.append(Paragraph(f"Skipped: {layers['skipped']}"))
        else:
            poolers = list(layers["sts_by_layer"])
            blocks.append(Table([number("Layer"), number("TokSim", 3), number("Cosine to previous layer", 3),
                                 *(number(f"STS-B {p}") for p in poolers)],
                                [[i, layers["token_similarity"][i],
                                  layers["inter_layer_cosine"][i - 1] if i else Formatted(""),
                                  *(layers["sts_by_layer"][p][i] for p in poolers)]
                                 for i in range(layers["layers"] + 1)]))
        blocks.append(Heading("STS after PCA (Spearman x 100)", 3))
        if "skipped" in pca:
            return [*blocks, Paragraph(f"Skipped: {pca['skipped']}")]
        dims = sorted(pca["dims"], key=int, reverse=True)
        tasks = [t for t in pca["dims"][dims[0]] if t != "avg"]
        return [*blocks, Table([number("Dims"), *(number(t) for t in tasks), number("Avg.")],
                               [[int(d), *(pca["dims"][d][t] for t in (*tasks, "avg"))] for d in dims]),
                Paragraph(f"Principal directions from {pca['reference_sentences']} sentences of {pca['reference']}.")]

    def main_scores(self, section: dict[str, Any]) -> dict[str, float | None]:
        return {key: section.get("alignment_uniformity", {}).get(key) for key in self.suite.main}

    def plots(self, section: dict[str, Any], out: Path, spec: str) -> dict[Path, str]:
        path = plot_geometry(section, out.with_suffix(".geometry.png"), spec)
        return {path: "alignment, uniformity and the layer-wise measures"}


@register_suite
class GeometrySuite(Suite):
    """Alignment/uniformity, the layer-wise measures and STS after PCA."""

    name, title = "geometry", "Geometry"
    rank = 50
    main = {"alignment": Score("Alignment", 3), "uniformity": Score("Uniformity", 3)}
    presenter = GeometryPresenter
    Options = STSTasks  # the STS tasks of its STS after PCA: the sts suite's setting
    params: STSTasks

    def run(self, encoder: Encoder) -> Result:
        files: list = []
        return Result(run_geometry(encoder, self.options, files, self.params.tasks), None, files=files)
