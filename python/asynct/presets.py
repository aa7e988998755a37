"""The preset shapes ``python -m asynct.train`` can train, as ``asynct init --preset`` writes them
(``model/src/presets.rs``; ``tests/test_torch_reference.py`` checks that the two agree). Only the
presets with a vocabulary small enough for a tokenizer trained on a small corpus are here."""

from typing import Any, Dict

PRESETS: Dict[str, Dict[str, Any]] = {
    "asynct-tiny": dict(vocab_size=512, hidden_size=64, intermediate_size=192, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                        max_position_embeddings=2048, rope_theta=10000.0),
    "asynct-mini": dict(vocab_size=4096, hidden_size=256, intermediate_size=640, num_hidden_layers=4,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                        max_position_embeddings=1024, rope_theta=10000.0),
}
