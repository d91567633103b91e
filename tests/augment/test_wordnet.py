import pytest

from cselab.augment.wordnet import Antonyms
from cselab.errors import DataError


def test_antonyms_from_wordnet_data_files(tmp_path):
    (tmp_path / "data.adj").write_text(
        "  1 This software and database is being provided\n"
        "00001740 00 a 01 able 0 001 ! 00002098 a 0101 | having the means\n"
        "00002098 00 a 02 unable 0 incapable 0 001 ! 00001740 a 0101 | not having the means\n")
    (tmp_path / "data.adv").write_text("00011093 02 r 01 quickly 0 001 ! 00011200 r 0101 | fast\n"
                                       "00011200 02 r 01 slowly 0 000 | not fast\n")
    antonyms = Antonyms(tmp_path)
    assert antonyms.get("Able") == "unable" and antonyms.get("unable") == "able"
    assert antonyms.get("incapable") is None and antonyms.get("quickly") == "slowly"


def test_missing_wordnet_says_how_to_get_it(tmp_path):
    with pytest.raises(DataError, match="apt-get install wordnet-base"):
        Antonyms(tmp_path)
