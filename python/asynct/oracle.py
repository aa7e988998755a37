"""The exact reference, on NumPy arrays: HP1 attention (SPEC section 2), UClipNorm (section 3)
and the whole model's forward (section 1), computed by the same Rust code the engine's CPU
backend runs and every GPU kernel is held against."""

from ._asynct import forward_logits, hp1_attention, uclip_norm

__all__ = ["hp1_attention", "uclip_norm", "forward_logits"]
