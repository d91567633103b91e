"""Data layer: the data root, readers for SentEval-layout files and a registry of named sets."""

from cselab.data.errors import DataFormatError, DataNotFoundError
from cselab.data.readers import NegationPairs, STSPairs, read_corpus, read_lines
from cselab.data.named import STS_TASKS, corpus_path, is_corpus, load_cannot, load_corpus, load_sts, sts_task
from cselab.data.root import ENV_VAR, data_root, senteval_dir

__all__ = [
    "DataFormatError", "DataNotFoundError", "NegationPairs", "STSPairs", "STS_TASKS", "ENV_VAR",
    "corpus_path", "data_root", "is_corpus", "load_cannot", "load_corpus", "load_sts", "read_corpus", "read_lines",
    "senteval_dir", "sts_task",
]
