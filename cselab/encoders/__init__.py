"""Sentence encoders: ``load_encoder(spec).encode(sentences) -> np.ndarray``."""

from cselab.lazy import exports

_WHERE = {
    "Encoder": "cselab.encoders.base", "CheckpointInfo": "cselab.encoders.checkpoint",
    "Encoding": "cselab.encoders.encoding",
    "read_checkpoint_info": "cselab.encoders.checkpoint", "write_checkpoint_info": "cselab.encoders.checkpoint",
    "LexicalEncoder": "cselab.encoders.lexical", "ALIASES": "cselab.encoders.specs",
    "EncoderNotFoundError": "cselab.encoders.specs", "load_encoder": "cselab.encoders.loading",
    "TransformerEncoder": "cselab.encoders.transformer",
}
__all__ = sorted(_WHERE)
__getattr__, __dir__ = exports(__name__, _WHERE)
