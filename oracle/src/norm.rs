//! UClipNorm (SPEC section 3).
