"""Named encodings: sentence vectors a decoder LM gives without training, each as its paper's released evaluation
makes them, spelled as :class:`~cselab.encoders.encoding.Encoding` settings (``probe run --model DECODER --encoding
NAME``; ``--pooler``, ``--prompt`` and ``--max-length`` given beside it replace the named value). Each setting is a
row of the protocol ledger (cselab/train/protocols.yaml, docs/protocols.md) citing the file and line it restates.
"""

from __future__ import annotations

from typing import Any

from cselab.errors import ConfigError, did_you_mean

#: MetaEOL's eight templates (Yibin-Lei/MetaEOL evaluation.py, c62096d), each a task and one word.
METAEOL_PROMPTS = [
    "In this task, you're presented with a text excerpt. Your task is to categorize the excerpt into a broad category "
    "such as 'Education', 'Technology', 'Health', 'Business', 'Environment', 'Politics', or 'Culture'. These "
    "categories help in organizing content for better accessibility and targeting. For this task, this sentence : "
    "\"{}\" should be classified under one general category in one word:\"",
    "In this task, you're given a statement and you need to determine whether it's presenting an 'Opinion' or a "
    "'Fact'. This distinction is vital for information verification, educational purposes, and content analysis. For "
    "this task, this sentence : \"{}\" discriminates between opinion and fact in one word:\"",
    "In this task, you're given a review from an online platform. Your task is to generate a rating for the product "
    "based on the review on a scale of 1-5, where 1 means 'extremely negative' and 5 means 'extremely positive'. For "
    "this task, this sentence : \"{}\" reflects the sentiment in one word:\"",
    "In this task, you're reading a personal diary entry. Your task is to identify the predominant emotion expressed, "
    "such as joy, sadness, anger, fear, or love. For this task, this sentence : \"{}\" conveys the emotion in one "
    "word:\"",
    "In this task, you're presented with two sentences. Your task is to assess whether the sentences convey the same "
    "meaning. Use 'identical', 'similar', 'different', or 'unrelated' to describe the relationship. To enhance the "
    "performance of this task, this sentence : \"{}\" means in one word:\"",
    "In this task, you're given a sentence and a phrase. Your task is to determine if the phrase can be a contextual "
    "synonym within the given sentence. Options include 'yes', 'no', or 'partially'. To enhance the performance of "
    "this task, this sentence : \"{}\" means in one word:\"",
    "In this task, you're examining a news article. Your task is to extract the most critical fact from the article. "
    "For this task, this sentence : \"{}\" encapsulates the key fact in one word:\"",
    "In this task, you're reviewing a scientific abstract. Your task is to identify the main entities (e.g., proteins, "
    "diseases) and their relations (e.g., causes, treats). For this task, this sentence : \"{}\" highlights the "
    "primary entity or relation in one word:\"",
]

#: name -> the Encoding settings it stands for; a list of prompts is the mean of the vectors under each template
#: (:class:`~cselab.encoders.template_mean.TemplateMean`).
NAMED_ENCODINGS: dict[str, dict[str, Any]] = {
    # PromptEOL (Jiang et al. 2023, kongds/scaling_sentemb evaluation.py): the last layer's state at the last token
    # of the one-word template, the sentence written as the evaluation writes it
    "prompteol": {"pooler": "last", "prompt": 'This sentence : "{}" means in one word:"', "sentence_form": "prompteol"},
    # MetaEOL (Lei et al. 2024, Yibin-Lei/MetaEOL evaluation.py): PromptEOL's vector in each of eight task templates,
    # averaged
    "metaeol": {"pooler": "last", "prompt": METAEOL_PROMPTS, "sentence_form": "prompteol"},
}


def named_encoding(name: str) -> dict[str, Any]:
    """The settings of the named encoding ``name``, or a ConfigError naming the known ones."""
    if name not in NAMED_ENCODINGS:
        raise ConfigError(f"--encoding {name!r}: not a named encoding{did_you_mean(name, NAMED_ENCODINGS)}; known: "
                          f"{', '.join(NAMED_ENCODINGS)}")
    return dict(NAMED_ENCODINGS[name])
