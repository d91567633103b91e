"""Names and figures the probe commands share: the STS tasks of the ``sts`` suite, the default number of
resamples, the Cont./Oppn. split rules (the classifier setups' names are in :mod:`cselab.evaluation.setups`)."""

STS_SUITE = ("sts12", "sts13", "sts14", "sts15", "sts16", "stsb", "sickr")
RESAMPLES = 1000  # bootstrap and permutation resamples of `probe compare` and the sweep
MAX_RESAMPLES = 100_000  # 100 times the default: p-values down to 2e-5; more is a typo, not a need
SPLIT_RULES = {"paper": "the 16 subsets of OssCSE's Table 2",
               "footnote": "every subset whose median gold score lies in [2, 3.5] (OssCSE's footnote 3)"}
