"""MoE Hugging Face configs (docs/MOE.md): tiny Qwen3MoeConfig / OlmoeConfig made and saved by the
real transformers are read by lmtrain (`lmtrain model info --preset DIR/config.json --json`) into the
right ModelConfig; the config.json lmtrain writes back (its "hf_config") rebuilds the same config in
transformers; and the parameter counts of transformers' own models built from those configs (sum of
numel; active = total minus (E - top_k) of each MoE layer's E experts) equal lmtrain's
param_count() and active_param_count(). Configs lmtrain cannot compute (mlp_only_layers listing an
MoE layer, OLMoE's clip_qkv) are refused with the key named. The full-size presets (olmoe-1b-7b,
qwen3-30b-a3b), exported as config.json, build transformers models (meta device) with the published
total and active counts.
"""
import json
import os
import sys

from lmt_fixtures import fresh_dir, lmtrain

FAILED = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILED.append(what)


def info(path):
    r = lmtrain("model", "info", "--preset", path, "--json")
    return json.loads(r.stdout)


def hf_counts(model, experts_per_layer, top_k):
    """Total parameters of a transformers model, and the active ones (top_k of E experts per MoE layer)."""
    total = sum(p.numel() for p in model.parameters())
    inactive = 0
    for layer in model.model.layers:
        experts = getattr(layer.mlp, "experts", None)
        if experts is None:
            continue  # a dense layer
        n = sum(p.numel() for p in experts.parameters())
        assert n % experts_per_layer == 0
        inactive += n // experts_per_layer * (experts_per_layer - top_k)
    return total, total - inactive


def save(config, name):
    d = fresh_dir(name)
    config.save_pretrained(d)
    return os.path.join(d, "config.json")


def rebuilt(hf_json):
    """transformers' config class of hf_json's model_type, built from lmtrain's config.json."""
    from transformers import AutoConfig

    d = fresh_dir("moe_rebuilt_" + hf_json["model_type"])
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(hf_json, f)
    return AutoConfig.from_pretrained(d)


def same_fields(a, b, keys, what):
    for k in keys:
        check(getattr(a, k) == getattr(b, k), f"{what}: {k} {getattr(a, k)!r} == {getattr(b, k)!r}")


def check_qwen3_moe():
    import torch
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    torch.manual_seed(0)
    cfg = Qwen3MoeConfig(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, moe_intermediate_size=32,
                         num_experts=8, num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=2,
                         mlp_only_layers=[], router_aux_loss_coef=0.02, tie_word_embeddings=False,
                         max_position_embeddings=128, rms_norm_eps=1e-6)
    path = save(cfg, "moe_qwen3")
    j = info(path)
    c = j["config"]
    check(c["moe"] == {"num_experts": 8, "top_k": 2, "expert_ffn": 32, "shared_experts": 0, "every": 2,
                       "moe_layers": 2, "renormalize": True}, f"qwen3_moe -> moe {c['moe']}")
    check(c["qk_norm"] and "qk_norm_full" not in c, "qwen3_moe: per-head QK-norm")
    check((c["d_model"], c["n_layers"], c["n_heads"], c["n_kv_heads"], c["head_dim"], c["ffn_hidden"]) ==
          (64, 4, 4, 2, 16, 96), "qwen3_moe: shape")
    check(not c["tied_embeddings"], "qwen3_moe: untied")
    total, active = hf_counts(Qwen3MoeForCausalLM(cfg), 8, 2)
    check(j["params"] == total, f"qwen3_moe: param_count {j['params']} == transformers' {total}")
    check(j["active_params"] == active, f"qwen3_moe: active {j['active_params']} == {active}")

    hf = j["hf_config"]
    check(hf is not None and hf["architectures"] == ["Qwen3MoeForCausalLM"], "qwen3_moe: exported as Qwen3MoeForCausalLM")
    back = rebuilt(hf)
    same_fields(back, cfg, ["hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                            "num_key_value_heads", "head_dim", "moe_intermediate_size", "num_experts",
                            "num_experts_per_tok", "norm_topk_prob", "decoder_sparse_step", "mlp_only_layers",
                            "tie_word_embeddings", "vocab_size"], "qwen3_moe back")
    check(abs(back.router_aux_loss_coef - 0.02) < 1e-9, "qwen3_moe back: router_aux_loss_coef")
    total_back, _ = hf_counts(Qwen3MoeForCausalLM(back), 8, 2)
    check(total_back == total, "qwen3_moe back: transformers builds the same parameter count")

    # mlp_only_layers: layers the step makes dense anyway are fine; an MoE layer is refused.
    cfg.mlp_only_layers = [0]
    check(info(save(cfg, "moe_qwen3_mlp_only_ok"))["params"] == total, "qwen3_moe: mlp_only_layers [0] with step 2 is expressible")
    cfg.mlp_only_layers = [1]
    r = lmtrain("model", "info", "--preset", save(cfg, "moe_qwen3_mlp_only_bad"), "--json", check=False)
    check(r.returncode != 0 and "mlp_only_layers lists layer 1" in r.stderr, "qwen3_moe: mlp_only_layers [1] refused by name")


def check_olmoe():
    import torch
    from transformers import OlmoeConfig, OlmoeForCausalLM

    torch.manual_seed(0)
    cfg = OlmoeConfig(vocab_size=96, hidden_size=64, intermediate_size=32, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, num_experts=8, num_experts_per_tok=2,
                      norm_topk_prob=False, router_aux_loss_coef=0.01, tie_word_embeddings=False,
                      max_position_embeddings=128)
    path = save(cfg, "moe_olmoe")
    j = info(path)
    c = j["config"]
    check(c["moe"] == {"num_experts": 8, "top_k": 2, "expert_ffn": 32, "shared_experts": 0, "every": 1,
                       "moe_layers": 2, "renormalize": False}, f"olmoe -> moe {c['moe']}")
    check(c["qk_norm"] and c.get("qk_norm_full") is True, "olmoe: full-width QK-norm")
    model = OlmoeForCausalLM(cfg)
    attn = model.model.layers[0].self_attn
    check(tuple(attn.q_norm.weight.shape) == (64,) and tuple(attn.k_norm.weight.shape) == (32,),
          "olmoe: transformers' q_norm [NH*HD] and k_norm [G*HD], as qk_norm_full")
    total, active = hf_counts(model, 8, 2)
    check(j["params"] == total, f"olmoe: param_count {j['params']} == transformers' {total}")
    check(j["active_params"] == active, f"olmoe: active {j['active_params']} == {active}")

    hf = j["hf_config"]
    check(hf is not None and hf["architectures"] == ["OlmoeForCausalLM"], "olmoe: exported as OlmoeForCausalLM")
    back = rebuilt(hf)
    same_fields(back, cfg, ["hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                            "num_key_value_heads", "num_experts", "num_experts_per_tok", "norm_topk_prob",
                            "clip_qkv", "tie_word_embeddings", "vocab_size"], "olmoe back")
    total_back, _ = hf_counts(OlmoeForCausalLM(back), 8, 2)
    check(total_back == total, "olmoe back: transformers builds the same parameter count")

    cfg.clip_qkv = 8.0
    r = lmtrain("model", "info", "--preset", save(cfg, "moe_olmoe_clip"), "--json", check=False)
    check(r.returncode != 0 and "clip_qkv" in r.stderr, "olmoe: clip_qkv refused by name")


def check_presets():
    """The full-size presets: the config.json lmtrain writes for them builds, in transformers (on the
    meta device: no memory), models with the issue's published total and active counts."""
    import torch
    from transformers import OlmoeForCausalLM, Qwen3MoeForCausalLM

    for preset, cls, total, active, experts in (("olmoe-1b-7b", OlmoeForCausalLM, 6919161856, 1282017280, 64),
                                                ("qwen3-30b-a3b", Qwen3MoeForCausalLM, 30532122624, 3353032704, 128)):
        j = info(preset)
        check((j["params"], j["active_params"]) == (total, active), f"{preset}: lmtrain counts {total} / {active}")
        with torch.device("meta"):
            model = cls(rebuilt(j["hf_config"]))
        check(hf_counts(model, experts, 8) == (total, active), f"{preset}: transformers' model of lmtrain's config.json "
                                                               f"has {hf_counts(model, experts, 8)}")


def main():
    try:
        import transformers  # noqa: F401
    except ImportError:
        print("SKIP: transformers is not installed (scripts/venv.sh interop)")
        sys.exit(77)
    check_qwen3_moe()
    check_olmoe()
    check_presets()
    if FAILED:
        print(f"{len(FAILED)} check(s) failed")
        sys.exit(1)


if __name__ == "__main__":
    main()
