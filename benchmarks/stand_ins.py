"""Random-weight stand-ins for the models a method's losses name (DiffCSE's generator, RankCSE's teachers), of the
released models' sizes and with the trained model's tokenizer: the arithmetic of the real ones, which are not
packaged (the timing scripts need no download). A generator is a 6-layer BERT-base masked LM (distilbert-base-uncased's
depth and width), a first teacher a BERT-base, a second a BERT-large (RankCSE's DiffCSE-base and SimCSE-large). A
preset that reads the trained model's own masked-LM head (InfoCSE) gets the model with a random head of its size
where it has none (:func:`with_lm_head`)."""

from __future__ import annotations

import hashlib
from pathlib import Path

SIZES = {  # BertConfig fields by the loss parameter that names the model; tiny runs use TINY
    "generator": {"num_hidden_layers": 6},
    "teacher": {},
    "second_teacher": {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
                       "intermediate_size": 4096},
}
TINY = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64}


def stand_in_models(method: str, tokenizer_path: str, folder: Path, tiny: bool = False) -> list[str]:
    """``--set`` overrides that give each model ``method``'s losses name a stand-in written under ``folder``."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM, BertModel

    from cselab.train.config.methods import load_method
    from cselab.train.out.folder import loss_models

    overrides = []
    for key in loss_models(load_method(method)):
        parameter = key.rsplit(".", 1)[1]
        path = folder / f"stand-in-{parameter}"
        if not (path / "config.json").exists():
            tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
            config = BertConfig(vocab_size=len(tokenizer), **(TINY if tiny else SIZES.get(parameter, {})))
            torch.manual_seed(0)
            (BertForMaskedLM if parameter == "generator" else BertModel)(config).save_pretrained(path)
            tokenizer.save_pretrained(path)
        overrides.append(f"{key}={path}")
    return overrides


LM_HEAD = {"infocse"}  # presets whose losses read the trained model's masked-LM head


def with_lm_head(model: str, folder: Path) -> str:
    """``model`` as a masked LM written under ``folder``: its own weights, and its masked-LM head where it has one,
    else a random head of its size (the packaged MiniLM has none)."""
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    path = folder / f"with-lm-head-{hashlib.sha256(model.encode()).hexdigest()[:12]}"  # one per model
    if not (path / "config.json").exists():
        torch.manual_seed(0)
        AutoModelForMaskedLM.from_pretrained(model).save_pretrained(path)
        AutoTokenizer.from_pretrained(model).save_pretrained(path)
    return str(path)
