"""Sentence encoders: ``load_encoder(spec).encode(sentences) -> np.ndarray``."""

from cselab.encoders.base import Encoder
from cselab.encoders.checkpoint import CheckpointInfo, read_checkpoint_info, write_checkpoint_info
from cselab.encoders.lexical import LexicalEncoder
from cselab.encoders.loading import ALIASES, EncoderNotFoundError, load_encoder
from cselab.encoders.pooling import POOLERS
from cselab.encoders.transformer import TransformerEncoder

__all__ = [
    "ALIASES", "POOLERS", "CheckpointInfo", "Encoder", "EncoderNotFoundError", "LexicalEncoder",
    "TransformerEncoder", "load_encoder", "read_checkpoint_info", "write_checkpoint_info",
]
