
from cselab.probes.transfer import run_transfer


def test_run_transfer_encodes_each_sentence_once(data_dir):
    from cselab.encoders import LexicalEncoder

    class Counting(LexicalEncoder):
        calls = 0

        def encode(self, sentences, **kwargs):
            Counting.calls += 1
            return super().encode(sentences, **kwargs)

    scores, files = run_transfer(Counting(), ("MRPC", "TREC"), data_dir, "fast", limit=40)
    assert Counting.calls == 1 and scores["sentences_encoded"] <= 4 * 40 + 2 * 40
    assert {"MRPC", "TREC", "avg"} <= set(scores) and "f1" in scores["MRPC"]
    assert scores["avg"] == (scores["MRPC"]["acc"] + scores["TREC"]["acc"]) / 2
    assert any(path.name == "TREC_10.label" for path in files)
