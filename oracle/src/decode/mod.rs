//! Decoding (SPEC section 5): sampling, stop conditions, incremental detokenisation.
