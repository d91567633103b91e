"""The ``ctranslate2`` back-translation backend: the ``hf`` backend's models run by CTranslate2 (int8 on the CPU,
float16 on a GPU by default), converted once into a cache.

A model (a hub name or a folder) is converted into ``ctranslate2/KEY/`` under cselab's cache folder
(:func:`cselab.files.cache_folder`), KEY hashing the model's files (their sha256), the ctranslate2 version, the
compute type (the weights are stored quantized) and :data:`LOADER_VERSION`; a change to any of them converts again.
A conversion is written beside its place and renamed into it, under a lock that a second process (another shard of
a cluster job) waits on rather than converting the same model twice.

Two families convert: Marian (opus-mt) through ctranslate2's own Transformers loader, and FSMT (the WMT19 models
OssCSE used), which ctranslate2 does not register, through :func:`fsmt_spec` onto its post-norm ``TransformerSpec``
with ctranslate2's fairseq weight setters (FSMT is fairseq's module layout). Either vocabulary is registered as the
model's ids written as strings, so that the model's own tokenizer makes the ids on the way in and reads them on the
way out, as it does for ``hf``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cselab.augment.backtranslate import PairTranslator, one_line
from cselab.augment.decoding import Decoding, length_batches
from cselab.augment.names import WMT19_PIVOTS
from cselab.checksum import folder_sha256
from cselab.errors import ConfigError, ModelError
from cselab.files import cache_folder
from cselab.locking import FolderLock
from cselab.registry import register

logger = logging.getLogger(__name__)

LOADER_VERSION = 1  # moves when the conversion below changes what it writes
COMPUTE_TYPES = ("auto", "float32", "float16", "bfloat16", "int8", "int8_float32", "int8_float16", "int8_bfloat16",
                 "int16")
INSTALL = "pip install 'cselab-toolkit[fast]' (or pip install ctranslate2)"
CONVERT_WAIT_S = 3600.0  # how long a shard waits for another converting the same model


def ctranslate2_module():
    """The ctranslate2 package, or a ConfigError saying how to install it."""
    try:
        import ctranslate2
    except ImportError:
        raise ConfigError(f"back-translation backend ctranslate2: the ctranslate2 package is not installed; "
                          f"{INSTALL}") from None
    return ctranslate2


def model_folder(name_or_path: str) -> Path:
    """The folder of a model: itself, or a hub name's snapshot (downloaded unless offline)."""
    if Path(name_or_path).is_dir():
        return Path(name_or_path)
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(name_or_path))
    except Exception as err:  # offline, unknown name, no network: one line
        raise ModelError(f"{name_or_path}: not a folder, and not fetched from the hub ({type(err).__name__}: "
                         f"{str(err).splitlines()[0] if str(err) else ''})") from None


def conversion_key(source: Path, compute_type: str) -> dict[str, Any]:
    """What a converted model depends on: the source files, ctranslate2's version, the compute type, the loader."""
    return {"model_sha256": folder_sha256(source), "ctranslate2": ctranslate2_module().__version__,
            "compute_type": compute_type, "loader": LOADER_VERSION}


def converted(source: Path, compute_type: str) -> Path:
    """The converted model of ``source`` at ``compute_type``: from the cache, else converted into it."""
    key = conversion_key(source, compute_type)
    folder = cache_folder("ctranslate2") / hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    lock = FolderLock(folder.with_name(f"{folder.name}.lock"), ModelError, "convert it elsewhere", wait=CONVERT_WAIT_S)
    with lock:
        if (folder / "cselab-conversion.json").is_file():
            return folder
        logger.info("converting %s for ctranslate2 (%s) into %s", source, compute_type, folder)
        staging = folder.with_name(f"{folder.name}.staging-{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        try:
            convert(source, staging, compute_type)
            (staging / "cselab-conversion.json").write_text(json.dumps({**key, "source": str(source)}, indent=2))
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        shutil.rmtree(folder, ignore_errors=True)  # a conversion killed before its record: converted again
        os.replace(staging, folder)
    return folder


def _marian_loader():
    from ctranslate2.converters.transformers import MarianMTLoader

    class MarianIds(MarianMTLoader):
        """ctranslate2's Marian loader with the ids as the vocabulary. It drops the last row of the embeddings (the
        ``<pad>`` Transformers appends to Marian's vocabulary, so that it is never generated)."""

        def get_vocabulary(self, model, tokenizer):
            return [str(i) for i in range(model.config.vocab_size - 1)]

        def set_config(self, config, model, tokenizer):
            config.eos_token = config.decoder_start_token = str(model.config.eos_token_id)
            config.unk_token = str(tokenizer.unk_token_id)

    return MarianIds()


def fsmt_spec(model, tokenizer):
    """FSMT (post-norm, sinusoidal positions from ``padding_idx + 1``, separate vocabularies) as ctranslate2's
    ``TransformerSpec``, its weights set by ctranslate2's fairseq setters."""
    from ctranslate2.converters import fairseq as setters
    from ctranslate2.specs import common_spec, transformer_spec

    config = model.config
    activations = {"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU}
    heads = config.encoder_attention_heads
    if config.activation_function not in activations or heads != config.decoder_attention_heads:
        raise ModelError(f"{config.name_or_path}: an FSMT model with activation {config.activation_function} and "
                         f"{config.encoder_attention_heads}/{config.decoder_attention_heads} attention heads cannot "
                         "be converted for ctranslate2; use backend=hf")
    spec = transformer_spec.TransformerSpec.from_config(
        (config.encoder_layers, config.decoder_layers), config.encoder_attention_heads, pre_norm=False,
        activation=activations[config.activation_function])
    model.requires_grad_(False)
    encoder, decoder = model.model.encoder, model.model.decoder
    setters.set_input_layers(spec.encoder, encoder)
    setters.set_input_layers(spec.decoder, decoder)
    for layer_spec, layer in zip(spec.encoder.layer, encoder.layers, strict=True):
        setters.set_transformer_encoder_layer(layer_spec, layer)
    for layer_spec, layer in zip(spec.decoder.layer, decoder.layers, strict=True):
        setters.set_transformer_decoder_layer(layer_spec, layer)
    setters.set_linear(spec.decoder.projection, decoder.output_projection)
    spec.register_source_vocabulary([str(i) for i in range(config.src_vocab_size)])
    spec.register_target_vocabulary([str(i) for i in range(config.tgt_vocab_size)])
    spec.config.bos_token, spec.config.eos_token = str(config.bos_token_id), str(config.eos_token_id)
    spec.config.decoder_start_token = str(config.decoder_start_token_id)
    spec.config.unk_token = str(tokenizer.unk_token_id)
    return spec


def source_spec(source: Path):
    """The ctranslate2 spec of a Marian or FSMT folder (the only families it takes; any other is refused in one
    line)."""
    from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer

    model_type = AutoConfig.from_pretrained(source).model_type
    if model_type not in ("marian", "fsmt"):
        raise ModelError(f"{source}: a {model_type} model; the ctranslate2 backend converts Marian (opus-mt) and "
                         "FSMT (WMT19) models; use backend=hf for this one")
    model = AutoModelForSeq2SeqLM.from_pretrained(source).float().eval()
    tokenizer = AutoTokenizer.from_pretrained(source)
    if model_type == "fsmt":
        return fsmt_spec(model, tokenizer)
    if model.config.pad_token_id != model.config.vocab_size - 1:
        raise ModelError(f"{source}: Marian's pad token is id {model.config.pad_token_id}, not the last "
                         f"({model.config.vocab_size - 1}), which ctranslate2's Marian conversion drops; use "
                         "backend=hf")
    return _marian_loader()(model, tokenizer)


def convert(source: Path, output_dir: Path, compute_type: str) -> None:
    """Write ``source`` converted (weights stored as ``compute_type``) into ``output_dir``."""
    from ctranslate2.converters.converter import Converter

    class Seq2Seq(Converter):
        def _load(self):
            return source_spec(source)

    Seq2Seq().convert(str(output_dir), quantization=compute_type)


@register("backtranslation", "ctranslate2")
class CT2Translator(PairTranslator):
    """Round trips through the ``hf`` backend's model pairs, run by CTranslate2 (see the module docstring). Batches
    are :func:`~cselab.augment.decoding.length_batches`; sampling draws each candidate as a row of its own, as
    ``hf`` does, from ``seed`` set at each call (per direction and chunk: ctranslate2 cannot reseed per batch)."""

    def __init__(self, pivots: Sequence[tuple[str, str]] = WMT19_PIVOTS, decoding: Decoding | None = None,
                 device: str | None = None):
        from transformers import AutoTokenizer

        ctranslate2 = ctranslate2_module()
        self.device = device or ("cuda" if ctranslate2.get_cuda_device_count() else "cpu")
        self.decoding = decoding = decoding or Decoding()
        self.compute_type = self.resolved_compute_type(decoding.compute_type, self.device)
        self.threads = decoding.threads or len(os.sched_getaffinity(0))
        self.pairs = [tuple((AutoTokenizer.from_pretrained(source), converted(source, self.compute_type))
                            for source in map(model_folder, pair)) for pair in pivots]
        self.loaded: dict[Path, Any] = {}
        self.name = f"ctranslate2:{self.compute_type}:" + ",".join(f"{a}+{b}" for a, b in pivots)

    def translator(self, folder: Path, fresh: bool = False):
        """The loaded model of a converted folder; ``fresh`` loads it again, so that its worker threads draw from
        the seed last set (ctranslate2 seeds a thread's generator once, at its first draw)."""
        if fresh or folder not in self.loaded:
            self.loaded[folder] = ctranslate2_module().Translator(str(folder), device=self.device,
                                                                  compute_type=self.compute_type,
                                                                  intra_threads=self.threads)
        return self.loaded[folder]

    @classmethod
    def resolved_compute_type(cls, compute_type: str, device: str | None = None) -> str:
        if compute_type not in COMPUTE_TYPES:
            raise ConfigError(f"augment config.compute_type: {compute_type!r} is not a ctranslate2 compute type; "
                              f"choose one of {', '.join(COMPUTE_TYPES)}")
        ctranslate2 = ctranslate2_module()
        device = device or ("cuda" if ctranslate2.get_cuda_device_count() else "cpu")
        if compute_type == "auto":
            return "float16" if device == "cuda" else "int8"
        if compute_type not in ctranslate2.get_supported_compute_types(device):
            raise ConfigError(f"augment config.compute_type: {compute_type} does not run on this {device} "
                              f"(it runs {', '.join(sorted(ctranslate2.get_supported_compute_types(device)))})")
        return compute_type

    def translate(self, model: Any, texts: Sequence[str], candidates: int = 1) -> list[list[str]]:
        tokenizer, folder = model
        decoding = self.decoding
        if decoding.sample:  # each call alike: a chunk's rows do not depend on the chunks before it
            ctranslate2_module().set_random_seed(decoding.seed)
        translator = self.translator(folder, fresh=decoding.sample)
        ids = tokenizer(list(texts), truncation=True, max_length=decoding.max_length)["input_ids"]
        repeat = candidates if decoding.sample else 1  # a sampled candidate is a row of its own, as in hf
        out: list[list[str]] = [[] for _ in texts]
        for rows in length_batches([len(row) for row in ids], decoding.batch_sentences, decoding.batch_tokens):
            tokens = [[str(t) for t in ids[i]] for i in rows for _ in range(repeat)]
            results = translator.translate_batch(
                tokens, max_batch_size=0, max_decoding_length=decoding.max_length,
                beam_size=1 if decoding.sample else decoding.num_beams, num_hypotheses=candidates // repeat,
                sampling_topk=decoding.sampling_topk if decoding.sample else 1)
            hypotheses = [h for result in results for h in result.hypotheses]
            decoded = tokenizer.batch_decode([[int(t) for t in h] for h in hypotheses], skip_special_tokens=True)
            for position, i in enumerate(rows):
                out[i] = [one_line(t) for t in decoded[position * candidates:(position + 1) * candidates]]
        return out
