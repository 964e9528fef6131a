"""Low-bit-accumulator GEMMs (seed 002): the bit-exact definition (`format`, `reference`)."""
