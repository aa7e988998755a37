"""AsyncT as ``transformers`` classes: ``AsyncTConfig`` and ``AsyncTForCausalLM``, registered with
``AutoConfig`` and ``AutoModelForCausalLM`` on import, so that

    import asynct.modeling
    model = AutoModelForCausalLM.from_pretrained("models/asynct-mini-shakespeare", dtype=torch.float32)
    model.save_pretrained("out")          # a folder `asynct generate --model out` loads

The forward is ``asynct.network``'s (the same modules, the same tensor names, the same bf16
rounding points when the weights are bf16); this file only adapts it to ``PreTrainedModel`` and
``GenerationMixin``: the KV cache of ``generate()`` (a ``transformers`` cache or the network's own
``KVCache``), ``labels`` for a loss, ``logits_to_keep``. Padding is refused: every row of a batch
must be all real tokens (``attention_mask`` all ones).

``import asynct`` does not import this module; importing it needs torch and ``transformers``.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, Dict, Optional

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM, GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from .checkpoint_io import norm_shapes_of, tensor_shapes
from .init_weights import init_module
from .network import AsyncTNetwork, Backbone, KVCache, NetworkConfig

# transformers 5 names the output's and generate()'s cache `cache`; earlier ones `past_key_values`.
CACHE_FIELD = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"

_HP1_DEFAULT = {"fir_k": 3, "relu_pre": True, "clip_min": 0.0, "clip_max": 1.0, "scale": None}


class AsyncTConfig(PretrainedConfig):
    """config.json of SPEC section 1 (``hp1`` a nested block), plus ``uclipnorm_shapes``: the
    stored shapes of each UClipNorm, filled from the checkpoint's tensors when it is loaded."""

    model_type = "asynct"

    def __init__(
        self,
        vocab_size: int = 4096,
        hidden_size: int = 256,
        intermediate_size: int = 640,
        num_hidden_layers: int = 4,
        num_attention_heads: int = 4,
        num_key_value_heads: int = 2,
        head_dim: Optional[int] = None,
        max_position_embeddings: int = 1024,
        rope_theta: float = 10000.0,
        tie_word_embeddings: bool = True,
        hidden_act: str = "silu",
        attention_bias: bool = False,
        hp1: Optional[Dict[str, Any]] = None,
        eos_token_id: Any = None,
        uclipnorm_shapes: Optional[Dict[str, Dict[str, Any]]] = None,
        use_cache: bool = True,
        **kwargs: Any,
    ):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_key_value_heads
        self.head_dim = head_dim if head_dim is not None else hidden_size // num_attention_heads
        self.max_position_embeddings = max_position_embeddings
        self.rope_theta = rope_theta
        self.hidden_act = hidden_act
        self.attention_bias = attention_bias
        self.hp1 = {**_HP1_DEFAULT, **(hp1 or {})}
        self.uclipnorm_shapes = dict(uclipnorm_shapes or {})
        self.use_cache = use_cache
        kwargs.setdefault("architectures", ["AsyncTForCausalLM"])
        super().__init__(tie_word_embeddings=tie_word_embeddings, eos_token_id=eos_token_id, **kwargs)
        self.network_config()  # refuses a bad value now, naming the field

    def network_config(self) -> NetworkConfig:
        d = {k: getattr(self, k) for k in (
            "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "head_dim", "max_position_embeddings", "rope_theta", "tie_word_embeddings",
            "hidden_act", "hp1", "uclipnorm_shapes")}
        d["eos_token_id"] = [] if self.eos_token_id is None else self.eos_token_id
        d["architectures"], d["model_type"] = ["AsyncTForCausalLM"], "asynct"
        return NetworkConfig.from_json_dict(d)

    def to_dict(self) -> Dict[str, Any]:
        out = super().to_dict()
        # The Rust loader's names: `torch_dtype` (transformers 5 writes `dtype`), eos ids as a list.
        dtype = out.get("dtype") or out.get("torch_dtype") or "bfloat16"
        out["torch_dtype"] = str(dtype).replace("torch.", "")
        eos = out.get("eos_token_id")
        out["eos_token_id"] = [] if eos is None else (eos if isinstance(eos, list) else [eos])
        out["rope_theta"] = self.rope_theta
        return out


class AsyncTForCausalLM(PreTrainedModel, GenerationMixin):
    """AsyncT for causal language modelling: ``model`` (embeddings, layers, final norm) and
    ``lm_head`` (absent when tied), with SPEC section 1's tensor names."""

    config_class = AsyncTConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    _no_split_modules = ["DecoderLayer"]

    # The network's forward, shared as plain functions over the same attributes.
    hidden = AsyncTNetwork.hidden
    logits = AsyncTNetwork.logits
    head_weight = AsyncTNetwork.head_weight

    def __init__(self, config: AsyncTConfig):
        super().__init__(config)
        self.cfg = config.network_config()
        self.model = Backbone(self.cfg)
        self.lm_head = None if self.cfg.tie_word_embeddings else nn.Linear(self.cfg.hidden_size, self.cfg.vocab_size, bias=False)
        self.post_init()

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: Any, *args: Any, **kwargs: Any) -> "AsyncTForCausalLM":
        """``PreTrainedModel.from_pretrained``, with the norms' shapes read from a local folder's
        safetensors headers first (a generated checkpoint stores ``[1]`` and ``[C]`` shapes and
        optional biases, and the modules must be built to match)."""
        folder = pathlib.Path(str(pretrained_model_name_or_path))
        if folder.is_dir():
            config = kwargs.get("config")
            if config is None:
                config = AsyncTConfig.from_pretrained(folder)
            shapes = norm_shapes_of(tensor_shapes(folder))
            config.uclipnorm_shapes = {p: dataclasses.asdict(s) for p, s in sorted(shapes.items())}
            kwargs["config"] = config
        return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)

    def _init_weights(self, module: nn.Module) -> None:
        """Fresh weights, where a checkpoint gives none: what ``asynct.train`` starts from."""
        init_module(module, self.cfg)

    def get_input_embeddings(self) -> nn.Module:
        return self.model.embed_tokens

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.model.embed_tokens = value

    def forward(
        self,
        input_ids: Optional[torch.LongTensor] = None,
        attention_mask: Optional[torch.Tensor] = None,
        position_ids: Optional[torch.LongTensor] = None,
        labels: Optional[torch.LongTensor] = None,
        use_cache: Optional[bool] = None,
        logits_to_keep: int = 0,
        inputs_embeds: Optional[torch.Tensor] = None,
        **kwargs: Any,
    ) -> CausalLMOutputWithPast:
        if input_ids is None or inputs_embeds is not None:
            raise ValueError("AsyncTForCausalLM takes input_ids (inputs_embeds is not supported)")
        if attention_mask is not None and attention_mask.dim() == 2 and not bool(attention_mask.bool().all()):
            raise ValueError("attention_mask has zeros: AsyncT takes unpadded rows only (batch prompts of one length)")
        cache = kwargs.pop("cache", None)
        cache = kwargs.pop("past_key_values", None) if cache is None else cache
        use_cache = self.config.use_cache if use_cache is None else use_cache
        if cache is None and use_cache:
            cache = KVCache()
        past = cache.get_seq_length(0) if cache is not None else 0
        if position_ids is not None:
            want = torch.arange(past, past + input_ids.shape[1], device=input_ids.device)
            if not bool((position_ids == want).all()):
                raise ValueError(f"position_ids must be {past}..{past + input_ids.shape[1] - 1}: positions follow the cache")
        h = self.hidden(input_ids, cache)
        if logits_to_keep:
            h = h[:, -logits_to_keep:]
        logits = self.logits(h)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), labels[:, 1:].reshape(-1), ignore_index=-100)
        return CausalLMOutputWithPast(loss=loss, logits=logits, **{CACHE_FIELD: cache if use_cache else None})


def network_of(model: AsyncTForCausalLM) -> AsyncTNetwork:
    """A plain-torch [`AsyncTNetwork`] sharing ``model``'s parameters (no copy)."""
    net = AsyncTNetwork.__new__(AsyncTNetwork)
    nn.Module.__init__(net)
    net.cfg = model.cfg
    net.model = model.model
    net.lm_head = model.lm_head
    return net


AutoConfig.register("asynct", AsyncTConfig, exist_ok=True)
AutoModelForCausalLM.register(AsyncTConfig, AsyncTForCausalLM, exist_ok=True)
