"""A tiny random Llama for the exporter's tests, fixtures and demo (fp8lab.export.demo(model="tiny")).

    >>> m = tiny_model()            # LlamaForCausalLM, float32, eval, 2 layers, 0.49M parameters, tied embeddings

It lives on its own so that fp8lab.export (its demo) and fp8lab.export_fixtures (which calls the exporter)
can both use it without importing each other.
"""
from __future__ import annotations

import torch

__all__ = ["TINY", "tiny_model"]

#: the tiny model's shape: every Linear dimension a multiple of 128, so 128x128 weight blocks and 1x128 activation
#: groups tile it exactly (vLLM's block-FP8 loader requires that; SmolLM2's 576 does not), and every Linear has
#: at least two blocks along one side (a single 128x128 block cannot be told from a per-tensor scale)
TINY = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=4, head_dim=64, vocab_size=256, max_position_embeddings=512,
            tie_word_embeddings=True, rms_norm_eps=1e-5)


def tiny_model(seed: int = 0, **overrides):
    """A random LlamaForCausalLM (float32, eval), tied embeddings like SmolLM2; a few large weights per
    Linear so that scales are set by outliers, as in trained models."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**{**TINY, **overrides})
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).float().eval()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.Linear) and m is not model.lm_head:
                w = m.weight
                idx = torch.randint(0, w.numel(), (4,), generator=g)
                w.view(-1)[idx] *= 25.0
    model.requires_grad_(False)
    return model
