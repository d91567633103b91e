"""The names the probe commands offer, kept apart from the probes' code so that ``--help`` imports no model
library: the suites, the STS tasks of the ``sts`` suite and the default number of resamples."""

SUITES = {"sts": ("sts",), "bias": ("bias",), "transfer": ("transfer",), "probing": ("probing",),
          "geometry": ("geometry",), "all": ("sts", "bias", "transfer", "probing", "geometry")}
STS_SUITE = ("sts12", "sts13", "sts14", "sts15", "sts16", "stsb", "sickr")
RESAMPLES = 1000  # bootstrap and permutation resamples of `probe compare` and the sweep
