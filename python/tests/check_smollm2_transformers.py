#!/usr/bin/env python3
"""Cross-checks smollm2_reference.py against Hugging Face transformers' own LlamaForCausalLM.

    pip install torch transformers numpy
    python3 python/tests/check_smollm2_transformers.py MODEL.gguf [--steps 32]

Builds LlamaForCausalLM from SmolLM2-135M-Instruct's published config.json values (below) in
float64 with the eager attention, loads into it the GGUF's weights as this reference reads them
(dequantized to float64, attn_q/attn_k rows un-permuted back to Hugging Face's layout), and runs
greedy decoding on the prompts of data/smollm2_prompts.json with transformers' forward (with
its own KV cache, fed the reference's tokens) beside the reference's. Prints, per prompt,
whether the greedy tokens agree and the largest relative logits difference over the steps
(max |a-b| / max |b| over the vocabulary), twice:
  * "published": transformers as it is. Whatever the model's dtype, its LlamaRMSNorm computes
    in float32, its LlamaRotaryEmbedding computes the angles, cos and sin in float32, and its
    eager attention takes the softmax in float32, so the difference is float32-sized (about
    1e-6): the bound is 1e-5;
  * "float64": the same model with those three replaced by the same formulas in float64: the
    bound is 1e-9.
Exits 1 on a token difference or a bound exceeded. The dequantization is checked separately
against the `gguf` package (see the commit that added this). Not a pytest: it needs torch and
transformers, which the tests do not.
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import smollm2_reference as ref  # noqa: E402

# HuggingFaceTB/SmolLM2-135M-Instruct config.json
CONFIG = dict(
    vocab_size=49152,
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    hidden_act="silu",
    max_position_embeddings=8192,
    rms_norm_eps=1e-5,
    rope_theta=100000.0,
    tie_word_embeddings=True,
    attention_bias=False,
    mlp_bias=False,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=2,
)


def hf_model(gguf):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    kwargs = dict(CONFIG)
    try:  # transformers 5 keeps RoPE's settings in rope_parameters
        config = LlamaConfig(**kwargs, rope_parameters={"rope_type": "default", "rope_theta": CONFIG["rope_theta"]})
    except TypeError:
        config = LlamaConfig(**kwargs)
    config._attn_implementation = "eager"
    theta = getattr(config, "rope_theta", None) or config.rope_parameters["rope_theta"]
    assert theta == 100000.0, "RoPE theta did not reach the config: %r" % theta
    torch.set_default_dtype(torch.float64)
    model = LlamaForCausalLM(config).eval()
    n_head, n_kv = CONFIG["num_attention_heads"], CONFIG["num_key_value_heads"]
    sd = {
        "model.embed_tokens.weight": gguf.tensor("token_embd.weight"),
        "model.norm.weight": gguf.tensor("output_norm.weight"),
    }
    for i in range(CONFIG["num_hidden_layers"]):
        p, h = "blk.%d." % i, "model.layers.%d." % i
        sd[h + "self_attn.q_proj.weight"] = ref.unpermute(gguf.tensor(p + "attn_q.weight"), n_head)
        sd[h + "self_attn.k_proj.weight"] = ref.unpermute(gguf.tensor(p + "attn_k.weight"), n_kv)
        sd[h + "self_attn.v_proj.weight"] = gguf.tensor(p + "attn_v.weight")
        sd[h + "self_attn.o_proj.weight"] = gguf.tensor(p + "attn_output.weight")
        sd[h + "mlp.gate_proj.weight"] = gguf.tensor(p + "ffn_gate.weight")
        sd[h + "mlp.up_proj.weight"] = gguf.tensor(p + "ffn_up.weight")
        sd[h + "mlp.down_proj.weight"] = gguf.tensor(p + "ffn_down.weight")
        sd[h + "input_layernorm.weight"] = gguf.tensor(p + "attn_norm.weight")
        sd[h + "post_attention_layernorm.weight"] = gguf.tensor(p + "ffn_norm.weight")
    sd = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in sd.items()}
    missing, unexpected = model.load_state_dict(sd, strict=False)
    missing = [m for m in missing if m != "lm_head.weight"]  # tied to the embedding
    assert not missing and not unexpected, (missing, unexpected)
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr(), "lm_head is not tied"
    return torch, model


def patch_float64(torch):
    """LlamaRMSNorm and LlamaRotaryEmbedding without their float32 casts."""
    from transformers.models.llama import modeling_llama as ml

    def rms_forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))

    hd = CONFIG["hidden_size"] // CONFIG["num_attention_heads"]
    inv = 1.0 / CONFIG["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)

    def rope_forward(self, x, position_ids):
        freqs = position_ids[..., None].to(torch.float64) * inv.to(x.device)
        emb = torch.cat((freqs, freqs), dim=-1)
        return (emb.cos() * self.attention_scaling).to(x.dtype), (emb.sin() * self.attention_scaling).to(x.dtype)

    def eager_forward(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
        # transformers' eager_attention_forward with its softmax in the inputs' dtype
        key = ml.repeat_kv(key, module.num_key_value_groups)
        value = ml.repeat_kv(value, module.num_key_value_groups)
        w = torch.matmul(query, key.transpose(2, 3)) * scaling
        if attention_mask is not None:
            w = w + attention_mask
        w = torch.nn.functional.softmax(w, dim=-1)
        return torch.matmul(w, value).transpose(1, 2).contiguous(), w

    ml.LlamaRMSNorm.forward = rms_forward
    ml.LlamaRotaryEmbedding.forward = rope_forward
    ml.eager_attention_forward = eager_forward


def compare(torch, hf, mine, prompts, steps):
    """[(name, tokens agree, max relative logits difference)]"""
    out = []
    for p in prompts:
        tokens, logits = mine.generate(p["ids"], steps)
        hf_tokens, worst, past = [], 0.0, None
        feed = list(p["ids"])
        with torch.no_grad():
            for s in range(steps):
                res = hf(input_ids=torch.tensor([feed]), past_key_values=past, use_cache=True)
                past = res.past_key_values
                got = res.logits[0, -1].numpy()
                worst = max(worst, float(np.abs(got - logits[s]).max() / np.abs(logits[s]).max()))
                hf_tokens.append(int(np.argmax(got)))
                feed = [tokens[s]]  # the reference's token, so that every step stays comparable
        out.append((p["name"], hf_tokens == tokens, worst))
        if hf_tokens != tokens:
            print("  %s: reference    %s\n  %s  transformers %s" % (p["name"], tokens, " " * len(p["name"]), hf_tokens))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--steps", type=int, default=32)
    args = ap.parse_args()
    gguf = ref.GGUFFile(args.model)
    torch, hf = hf_model(gguf)
    import transformers

    print("transformers %s, torch %s" % (transformers.__version__, torch.__version__))
    mine = ref.Model(gguf)
    prompts = json.loads((HERE / "data" / "smollm2_prompts.json").read_text())["prompts"]
    bad = False
    for mode, bound in (("published", 1e-5), ("float64", 1e-9)):
        if mode == "float64":
            patch_float64(torch)
        for name, same, worst in compare(torch, hf, mine, prompts, args.steps):
            ok = same and worst <= bound
            bad |= not ok
            print(
                "%-9s %-16s %d greedy tokens %s, max relative logits difference %.2e (bound %g)%s"
                % (mode, name, args.steps, "agree" if same else "DIFFER", worst, bound, "" if ok else "  FAIL")
            )
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
