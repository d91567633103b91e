"""The augment stage's names and defaults, each kept here once and imported by the code and the CLI (importing this
module loads no model library): the round trips of the back-translation backends and the MER band a paraphrase
must fall in."""

WMT19_PIVOTS = (("facebook/wmt19-en-de", "facebook/wmt19-de-en"), ("facebook/wmt19-en-ru", "facebook/wmt19-ru-en"))
APERTIUM_PIVOTS = (("eng-spa", "spa-eng"),)
MER_BAND = (0.15, 0.6)  # OssCSE appendix A: a paraphrase is kept when low <= MER <= high
