"""Make a tiny random-weight model that vLLM can serve, without any model hub.

Two kinds (``KINDS``), same 2-layer shape (hidden 128, 2 attention heads of head_dim 64, 1 KV head):
- ``tiny-llama``: a Llama for generation, with a chat template so ``/v1/chat/completions`` works;
- ``tiny-qwen3-embed``: a Qwen3 decoder shaped like Qwen3-Embedding (``Qwen3ForCausalLM``, tied
  embeddings, q/k norms), served by vLLM's pooling runner (``--runner pooling --convert embed``), which
  drops the LM head and returns the last token's normalised hidden state: 128-dimensional vectors.
Both get a byte-level BPE tokenizer trained on the spot from a small built-in text. They are written with
``transformers.save_pretrained`` (safetensors) and are a few hundred KB. Output is noise: they exist to
exercise a serving stack.

Needs torch, transformers and tokenizers (imported lazily, so importing this
module stays cheap).

    python -m kit.config.tinymodel OUT_DIR [--kind tiny-llama|tiny-qwen3-embed] [--seed N] [--if-missing]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# Shape of the model. head_dim 64: vLLM's CPU attention kernel rejects 16.
NUM_LAYERS = 2
HIDDEN_SIZE = 128
NUM_HEADS = 2
NUM_KV_HEADS = 1
HEAD_DIM = HIDDEN_SIZE // NUM_HEADS  # 64
INTERMEDIATE_SIZE = 256
VOCAB_SIZE = 512
MAX_POSITION_EMBEDDINGS = 2048
DTYPE = "bfloat16"

# kind -> (architecture, model_type, tied embeddings). Qwen3-Embedding-0.6B builds on Qwen3-0.6B, whose
# config.json declares Qwen3ForCausalLM with tied embeddings; vLLM's pooling runner converts such a decoder to
# an embedding model (vllm/config/model.py at 0.32.0: `--convert embed`, last-token pooling, normalised).
KINDS = {
    "tiny-llama": ("LlamaForCausalLM", "llama", False),
    "tiny-qwen3-embed": ("Qwen3ForCausalLM", "qwen3", True),
}
DEFAULT_KIND = "tiny-llama"


def shape_config(kind: str = DEFAULT_KIND) -> dict:
    """The config.json fields of the model this module makes, for planning before it exists."""
    architecture, model_type, tied = KINDS[kind]
    return {
        "architectures": [architecture],
        "model_type": model_type,
        "num_hidden_layers": NUM_LAYERS,
        "hidden_size": HIDDEN_SIZE,
        "num_attention_heads": NUM_HEADS,
        "num_key_value_heads": NUM_KV_HEADS,
        "head_dim": HEAD_DIM,
        "intermediate_size": INTERMEDIATE_SIZE,
        "vocab_size": VOCAB_SIZE,
        "max_position_embeddings": MAX_POSITION_EMBEDDINGS,
        "tie_word_embeddings": tied,
        "torch_dtype": DTYPE,
    }


BOS, EOS, UNK, PAD = "<s>", "</s>", "<unk>", "<pad>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
SPECIAL_TOKENS = [UNK, BOS, EOS, PAD, *ROLE_TOKENS]

# A plain, role-tagged chat template; each turn ends with EOS.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ eos_token + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)

_SUBJECTS = (
    "the server", "a container", "the model", "every request", "the cache",
    "a token", "the scheduler", "this engine", "the client", "a worker",
)
_VERBS = (
    "starts", "answers", "stores", "reads", "writes", "streams", "checks",
    "measures", "loads", "serves",
)
_OBJECTS = (
    "the weights", "a prompt", "many blocks", "the health check", "some text",
    "its metrics", "a small batch", "the logs", "one reply", "the port",
)
_EXTRA = (
    "Hello, world! How are you today? I am fine, thank you.",
    "The quick brown fox jumps over the lazy dog 0123456789 times.",
    "User: what is the capital of France? Assistant: Paris is the capital.",
    "Numbers: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 100, 1000, 2048, 4096.",
    "def main():\n    print('hello')\n    return 0\n",
)


def _corpus() -> list[str]:
    """A fixed training text (same on every run, independent of the seed)."""
    lines = list(_EXTRA)
    for i, s in enumerate(_SUBJECTS):
        for j, v in enumerate(_VERBS):
            o = _OBJECTS[(i * 3 + j * 7) % len(_OBJECTS)]
            lines.append(f"{s.capitalize()} {v} {o}, and {_SUBJECTS[j]} {_VERBS[i]} it again.")
    return lines


def _train_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=1,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    return tok


def make_tiny_model(out_dir: Path, *, seed: int = 0, kind: str = DEFAULT_KIND) -> Path:
    """Write the tiny model of ``kind`` and its tokenizer into ``out_dir`` and return it.

    Deterministic for a given seed (weights from ``torch.manual_seed(seed)``;
    the tokenizer's training text is fixed).
    """
    import torch
    import transformers
    from transformers import PreTrainedTokenizerFast

    architecture, model_type, tied = KINDS[kind]

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    raw = _train_tokenizer()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        bos_token=BOS,
        eos_token=EOS,
        unk_token=UNK,
        pad_token=PAD,
        additional_special_tokens=list(ROLE_TOKENS),
        model_max_length=MAX_POSITION_EMBEDDINGS,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    vocab = len(tokenizer)
    if vocab > VOCAB_SIZE:  # cannot happen with BpeTrainer(vocab_size=VOCAB_SIZE)
        raise RuntimeError(f"tokenizer has {vocab} tokens, more than {VOCAB_SIZE}")

    config_class = transformers.AutoConfig.for_model(model_type).__class__
    config = config_class(
        vocab_size=vocab,  # exactly the tokenizer's size: every sampled id decodes
        hidden_size=HIDDEN_SIZE,
        intermediate_size=INTERMEDIATE_SIZE,
        num_hidden_layers=NUM_LAYERS,
        num_attention_heads=NUM_HEADS,
        num_key_value_heads=NUM_KV_HEADS,
        head_dim=HEAD_DIM,
        max_position_embeddings=MAX_POSITION_EMBEDDINGS,
        rms_norm_eps=1e-5,
        tie_word_embeddings=tied,
        bos_token_id=tokenizer.convert_tokens_to_ids(BOS),
        eos_token_id=tokenizer.convert_tokens_to_ids(EOS),
        pad_token_id=tokenizer.convert_tokens_to_ids(PAD),
    )
    torch.manual_seed(seed)
    model = getattr(transformers, architecture)(config).to(getattr(torch, DTYPE)).eval()
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)

    # Pin the dtype in config.json whatever key this transformers version uses.
    cfg_path = out_dir / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["torch_dtype"] = DTYPE
    cfg["dtype"] = DTYPE
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")

    # save_pretrained writes model.safetensors as 0600; make everything world-readable
    # so a container's non-root user can read a read-only bind mount of the directory.
    out_dir.chmod(0o755)
    for f in out_dir.iterdir():
        if f.is_file():
            f.chmod(0o644)
    return out_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kit.config.tinymodel",
        description="Write a tiny random-weight model (for smoke tests) into OUT_DIR.",
    )
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--kind", choices=sorted(KINDS), default=DEFAULT_KIND)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--if-missing", action="store_true",
                        help="Do nothing when OUT_DIR already holds a config.json (the stack's model-make service).")
    args = parser.parse_args(argv)
    if args.if_missing and (args.out_dir / "config.json").is_file():
        print(f"{args.out_dir}: a model is there already")
        return 0
    path = make_tiny_model(args.out_dir, seed=args.seed, kind=args.kind)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
