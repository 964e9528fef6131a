"""The grid-search sweep: YAML spaces → named filters → builds → accuracy gate → benchmark → CSV tables."""
