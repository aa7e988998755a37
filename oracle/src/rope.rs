//! Rotary position embedding (SPEC section 1).
