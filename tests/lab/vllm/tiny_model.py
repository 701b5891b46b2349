"""Build the lab's tiny Llama models: stand-ins for a real checkpoint (no model hub is reachable).

    <vllm-venv>/bin/python tests/lab/vllm/tiny_model.py [--out DIR]

Writes, deterministically (seeded), under DIR (default /var/cache/llmops-lab/models):
  tiny-llama/        target: LlamaConfig hidden 128, 4 heads, 2 KV heads, head_dim 32, 2 layers,
                     vocab 1024, random weights (bfloat16 safetensors), a byte-level BPE tokenizer
                     trained with `tokenizers` on the built-in text below, a chat template.
  tiny-llama-draft/  draft for `draft_model` speculative decoding: same tokenizer/vocab, 1 layer.
Idempotent: a `.stamp` in each directory holds the recipe hash; rebuilt when missing or changed.
head_dim must stay >= 32: with 16 the CPU engine passes /health and dies on the first request.
The weights are random: the text the models produce is noise; they exist to exercise the engine,
the API, streaming, metrics and speculative decoding, not to answer well.
"""
import argparse
import hashlib
import json
import os
import shutil
import sys

RECIPE_VERSION = 2
SEED = 1234
VOCAB = 1024
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}{{ eos_token }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
TEXT = """\
The cluster serves an OpenAI compatible endpoint behind a load balancer.
Each replica runs the engine with speculative decoding; a small draft proposes tokens
and the target model verifies them in one forward pass. Accepted tokens are free.
Operators upgrade one layer at a time: drivers, the container toolkit, the engine, the balancer.
A failed change leaves the previous configuration serving and the play reports the reason.
Metrics are scraped from every replica: requests running, requests waiting, time to first token,
inter token latency, cache usage, drafts and accepted tokens. Alerts fire when a replica is down.
Hello, how are you? I am fine, thank you. What is the capital of France? Paris is the capital.
Count with me: one two three four five six seven eight nine ten eleven twelve thirteen fourteen.
The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs.
""" * 4

MODELS = {
    "tiny-llama": dict(num_hidden_layers=2),
    "tiny-llama-draft": dict(num_hidden_layers=1),
}


def arch():
    return dict(vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_attention_heads=4,
                num_key_value_heads=2, head_dim=32, max_position_embeddings=2048, rms_norm_eps=1e-5,
                rope_theta=10000.0, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                pad_token_id=0, torch_dtype="bfloat16")


def recipe(name):
    blob = json.dumps([RECIPE_VERSION, SEED, arch(), MODELS[name], TEXT, CHAT_TEMPLATE], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def build_tokenizer(path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<pad>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(TEXT.splitlines(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    fast.chat_template = CHAT_TEMPLATE
    fast.model_max_length = 2048
    fast.save_pretrained(path)
    return len(tok.get_vocab())


def build(name, out):
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    dest = os.path.join(out, name)
    stamp = os.path.join(dest, ".stamp")
    want = recipe(name)
    if os.path.exists(stamp) and open(stamp).read().strip() == want:
        print(f"[tiny-model] up to date: {dest}")
        return
    tmp = dest + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    n = build_tokenizer(tmp)
    if n > VOCAB:
        sys.exit(f"tokenizer vocabulary {n} exceeds the model's {VOCAB}")
    torch.manual_seed(SEED)
    cfg = LlamaConfig(**arch(), **MODELS[name])
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(tmp, safe_serialization=True)
    GenerationConfig(bos_token_id=1, eos_token_id=2, pad_token_id=0).save_pretrained(tmp)
    with open(os.path.join(tmp, ".stamp"), "w") as fh:
        fh.write(want + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    os.rename(tmp, dest)
    for root, dirs, files in os.walk(dest):
        for d in dirs:
            os.chmod(os.path.join(root, d), 0o755)
        for f in files:
            os.chmod(os.path.join(root, f), 0o644)
    os.chmod(dest, 0o755)
    size = sum(os.path.getsize(os.path.join(dest, f)) for f in os.listdir(dest))
    print(f"[tiny-model] built {dest} ({size / 1e6:.1f} MB, {MODELS[name]['num_hidden_layers']} layers, "
          f"tokenizer vocab {n}, recipe {want})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.environ.get("LAB_CACHE", "/var/cache/llmops-lab"), "models"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for name in MODELS:
        build(name, args.out)


if __name__ == "__main__":
    main()
