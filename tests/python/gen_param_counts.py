#!/usr/bin/env python3
"""Writes tests/python/hf_param_counts.json: exact parameter counts of the shipped model
architectures (configs/models/*.yaml) as Hugging Face transformers builds them, for the C++
side to compare its own counts against.

Each model is instantiated from a full-size config with its parameters on the meta device
(no memory, no weights) and its parameters are counted (tied weights once). Families whose
model class the pinned transformers lacks are listed under "skipped".

    .venv/bin/python tests/python/gen_param_counts.py          # rewrite the JSON
    .venv/bin/python tests/python/gen_param_counts.py --check  # compare, exit 1 on change
"""

import argparse
import json
import os
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
OUTPUT = os.path.join(HERE, "hf_param_counts.json")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "tools", "python"))

from tierflow_export import parameters_on_meta  # noqa: E402 - the exporter's meta-device build

# Hugging Face config fields of each shipped architecture (configs/models/NAME.yaml), and
# a few well-known checkpoints of the other families the pinned transformers has.
MODELS = [
    {"name": "llama-2-7b", "shipped": "configs/models/llama-2-7b.yaml", "config": {
        "model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
        "vocab_size": 32000, "max_position_embeddings": 4096, "rms_norm_eps": 1e-05,
        "tie_word_embeddings": False}},
    {"name": "llama-3-8b", "shipped": "configs/models/llama-3-8b.yaml", "config": {
        "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "vocab_size": 128256, "max_position_embeddings": 8192, "rope_theta": 500000.0,
        "rms_norm_eps": 1e-05, "tie_word_embeddings": False}},
    {"name": "llama-3-70b", "shipped": "configs/models/llama-3-70b.yaml", "config": {
        "model_type": "llama", "hidden_size": 8192, "intermediate_size": 28672,
        "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
        "vocab_size": 128256, "max_position_embeddings": 8192, "rope_theta": 500000.0,
        "rms_norm_eps": 1e-05, "tie_word_embeddings": False}},
    {"name": "llama-3.1-70b", "shipped": "configs/models/llama-3.1-70b.yaml", "config": {
        "model_type": "llama", "hidden_size": 8192, "intermediate_size": 28672,
        "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
        "vocab_size": 128256, "max_position_embeddings": 131072, "rope_theta": 500000.0,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
        "rms_norm_eps": 1e-05, "tie_word_embeddings": False}},
    {"name": "llama-3.1-405b", "shipped": "configs/models/llama-3.1-405b.yaml", "config": {
        "model_type": "llama", "hidden_size": 16384, "intermediate_size": 53248,
        "num_hidden_layers": 126, "num_attention_heads": 128, "num_key_value_heads": 8,
        "vocab_size": 128256, "max_position_embeddings": 131072, "rope_theta": 500000.0,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
        "rms_norm_eps": 1e-05, "tie_word_embeddings": False}},
    {"name": "mixtral-8x7b", "shipped": "configs/models/mixtral-8x7b.yaml", "config": {
        "model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000,
        "max_position_embeddings": 32768, "rope_theta": 1000000.0, "rms_norm_eps": 1e-05,
        "tie_word_embeddings": False}},
    {"name": "opt-30b", "shipped": "configs/models/opt-30b.yaml", "config": {
        "model_type": "opt", "hidden_size": 7168, "ffn_dim": 28672, "num_hidden_layers": 48,
        "num_attention_heads": 56, "vocab_size": 50272, "max_position_embeddings": 2048,
        "word_embed_proj_dim": 7168, "do_layer_norm_before": True, "enable_bias": True,
        "tie_word_embeddings": True}},
    {"name": "opt-175b", "shipped": "configs/models/opt-175b.yaml", "config": {
        "model_type": "opt", "hidden_size": 12288, "ffn_dim": 49152, "num_hidden_layers": 96,
        "num_attention_heads": 96, "vocab_size": 50272, "max_position_embeddings": 2048,
        "word_embed_proj_dim": 12288, "do_layer_norm_before": True, "enable_bias": True,
        "tie_word_embeddings": True}},
    {"name": "deepseek-v3", "shipped": "configs/models/deepseek-v3.yaml", "config": {
        "model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432,
        "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128,
        "num_key_value_heads": 128, "q_lora_rank": 1536, "kv_lora_rank": 512,
        "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
        "vocab_size": 129280, "n_routed_experts": 256, "n_shared_experts": 1,
        "num_experts_per_tok": 8, "first_k_dense_replace": 3, "moe_layer_freq": 1,
        "n_group": 8, "topk_group": 4, "topk_method": "noaux_tc",
        "tie_word_embeddings": False}},
    # Not shipped: one checkpoint of each other family, for the families' own code paths
    # (Mistral's sliding window, Qwen2's q/k/v biases, Qwen2-MoE's shared expert).
    {"name": "mistral-7b-v0.1", "shipped": None, "config": {
        "model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "vocab_size": 32000, "max_position_embeddings": 32768, "sliding_window": 4096,
        "rope_theta": 10000.0, "rms_norm_eps": 1e-05, "tie_word_embeddings": False}},
    {"name": "qwen2-7b", "shipped": None, "config": {
        "model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944,
        "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
        "vocab_size": 152064, "max_position_embeddings": 131072, "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-06, "tie_word_embeddings": False}},
    {"name": "qwen1.5-moe-a2.7b", "shipped": None, "config": {
        "model_type": "qwen2_moe", "hidden_size": 2048, "intermediate_size": 5632,
        "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
        "num_experts": 60, "num_experts_per_tok": 4, "num_hidden_layers": 24,
        "num_attention_heads": 16, "num_key_value_heads": 16, "vocab_size": 151936,
        "max_position_embeddings": 8192, "rope_theta": 1000000.0, "rms_norm_eps": 1e-06,
        "decoder_sparse_step": 1, "tie_word_embeddings": False}},
    {"name": "qwen3-30b-a3b", "shipped": None, "config": {
        "model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144,
        "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
        "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4,
        "head_dim": 128, "vocab_size": 151936, "tie_word_embeddings": False}},
    # The families in use now (tests/fixtures/hf/released/ holds their released configs).
    # Gemma-2: sliding layers, softcapping, four norms per block, tied head.
    {"name": "gemma-2-9b", "shipped": None, "config": {
        "model_type": "gemma2", "hidden_size": 3584, "intermediate_size": 14336,
        "num_hidden_layers": 42, "num_attention_heads": 16, "num_key_value_heads": 8,
        "head_dim": 256, "vocab_size": 256000, "max_position_embeddings": 8192,
        "sliding_window": 4096, "attn_logit_softcapping": 50.0,
        "final_logit_softcapping": 30.0, "query_pre_attn_scalar": 256,
        "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "tie_word_embeddings": True}},
    {"name": "gemma-2-2b", "shipped": None, "config": {
        "model_type": "gemma2", "hidden_size": 2304, "intermediate_size": 9216,
        "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
        "head_dim": 256, "vocab_size": 256000, "max_position_embeddings": 8192,
        "sliding_window": 4096, "attn_logit_softcapping": 50.0,
        "final_logit_softcapping": 30.0, "query_pre_attn_scalar": 256,
        "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "tie_word_embeddings": True}},
    # Phi-3: fused qkv and gate/up projections, a window on every layer.
    {"name": "phi-3-mini-4k-instruct", "shipped": None, "config": {
        "model_type": "phi3", "hidden_size": 3072, "intermediate_size": 8192,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
        "vocab_size": 32064, "max_position_embeddings": 4096,
        "original_max_position_embeddings": 4096, "sliding_window": 2047,
        "rope_theta": 10000.0, "rms_norm_eps": 1e-05, "tie_word_embeddings": False}},
    # Classes the pinned release lacks: counted by hand against the model cards in
    # tests/traces/hf_import_test.cpp.
    {"name": "qwen3-8b", "shipped": None, "arrived": "4.51", "config": {
        "model_type": "qwen3", "hidden_size": 4096, "intermediate_size": 12288,
        "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
        "head_dim": 128, "vocab_size": 151936, "tie_word_embeddings": False}},
    {"name": "gemma-3-27b-it", "shipped": None, "arrived": "4.50", "config": {
        "model_type": "gemma3_text", "hidden_size": 5376, "intermediate_size": 21504,
        "num_hidden_layers": 62, "num_attention_heads": 32, "num_key_value_heads": 16,
        "head_dim": 128, "sliding_window": 1024, "query_pre_attn_scalar": 168}},
    {"name": "llama-4-scout-17b-16e", "shipped": None, "arrived": "4.51", "config": {
        "model_type": "llama4_text", "hidden_size": 5120, "intermediate_size": 8192,
        "intermediate_size_mlp": 16384, "num_hidden_layers": 48, "num_attention_heads": 40,
        "num_key_value_heads": 8, "head_dim": 128, "num_local_experts": 16,
        "num_experts_per_tok": 1, "interleave_moe_layer_step": 1, "vocab_size": 202048,
        "attention_chunk_size": 8192, "tie_word_embeddings": False}},
    {"name": "gpt-oss-120b", "shipped": None, "arrived": "4.55", "config": {
        "model_type": "gpt_oss", "hidden_size": 2880, "intermediate_size": 2880,
        "num_hidden_layers": 36, "num_attention_heads": 64, "num_key_value_heads": 8,
        "head_dim": 64, "num_local_experts": 128, "num_experts_per_tok": 4,
        "vocab_size": 201088, "sliding_window": 128, "tie_word_embeddings": False}},
]


def count(entry):
    """The counts of one model, or None when the pinned transformers lacks its class."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    config = dict(entry["config"])
    model_type = config.pop("model_type")
    if model_type not in CONFIG_MAPPING:
        return None
    hf_config = AutoConfig.for_model(model_type, **config)
    with parameters_on_meta(torch):
        model = AutoModelForCausalLM.from_config(hf_config, attn_implementation="eager")
    params = list(model.parameters())  # each tied parameter once
    total = sum(p.numel() for p in params)
    if any(p.device.type != "meta" for p in params):
        raise RuntimeError(f"{entry['name']}: a parameter was not moved to the meta device")
    embedding = model.get_input_embeddings().weight
    head = model.get_output_embeddings()
    tied = head is not None and head.weight is embedding
    inactive = 0
    top_k = getattr(hf_config, "num_experts_per_tok", None)
    for module in model.modules():
        experts = getattr(module, "experts", None)
        if isinstance(experts, torch.nn.ModuleList) and top_k:
            per_expert = [sum(p.numel() for p in e.parameters()) for e in experts]
            if len(set(per_expert)) != 1:
                raise RuntimeError(f"{entry['name']}: experts of unequal size")
            inactive += (len(experts) - top_k) * per_expert[0]
    return {
        "name": entry["name"],
        "family": model_type,
        "class": type(model).__name__,
        "shipped": entry["shipped"],
        "params": total,
        "active_params": total - inactive,
        "embedding_params": embedding.numel(),
        "head_params": 0 if tied or head is None else head.weight.numel(),
        "tied_embeddings": tied,
        "config": entry["config"],
    }


def generate():
    warnings.filterwarnings("ignore")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    import transformers
    transformers.logging.set_verbosity_error()
    models, skipped = [], []
    for entry in MODELS:
        result = count(entry)
        if result is None:
            skipped.append({
                "name": entry["name"], "family": entry["config"]["model_type"],
                "shipped": entry["shipped"],
                "reason": f"transformers {transformers.__version__} has no "
                          f"{entry['config']['model_type']} model class (it arrived in "
                          f"{entry.get('arrived', '4.51')}, which needs torch >= 2.0)"})
        else:
            models.append(result)
    return {
        "format": "tierflow.hf_param_counts/1",
        "generator": "tests/python/gen_param_counts.py",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "note": "params: all parameters, tied ones once; active_params: those one token "
                "uses (routed experts: top-k of them; embedding and head included)",
        "models": models,
        "skipped": skipped,
    }


def render(doc):
    return json.dumps(doc, indent=2) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="compare with the committed file instead of writing it")
    args = parser.parse_args()
    text = render(generate())
    if args.check:
        with open(OUTPUT, encoding="utf-8") as f:
            if f.read() != text:
                print(f"{OUTPUT} is out of date; run {sys.argv[0]}", file=sys.stderr)
                return 1
        return 0
    tmp = OUTPUT + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, OUTPUT)
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
