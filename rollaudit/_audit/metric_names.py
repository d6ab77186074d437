"""The spec's audit metric names (``shared/spec/schemes.md``), torch-free for parsers and renderers."""

# Column order of every summary: the spec's names.
METRICS = (
    "sign_flip_rate",
    "strict_flip_rate",
    "nonzero",
    "nonzero_reference",
    "nonzero_inflation",
    "spurious_nonzero",
    "lost_signal",
    "max_abs_diff",
    "mean_abs_diff",
    "token_flip_rate",
    "advantage_cosine",
    "compared",
    "undefined",
)
COUNT_METRICS = frozenset({"nonzero", "nonzero_reference", "spurious_nonzero", "lost_signal", "compared", "undefined"})
# Shares in [0, 1] (the cosine in [-1, 1]): a gate's "0.5%" on these is percentage points.
RATE_METRICS = frozenset({"sign_flip_rate", "strict_flip_rate", "token_flip_rate", "advantage_cosine"})
