"""``sglang-pdd tiny-model``: write a small random Llama model and a local tokenizer.

No hub access exists in CI, so tests and examples serve a model generated here: a
Llama-architecture checkpoint with seeded random weights and a byte-level BPE tokenizer trained on
a seeded synthetic corpus, with a chat template so ``/v1/chat/completions`` works as on a real
model: its own, or (``--chat-template FAMILY``) one in the style of a model family's
(``chat_templates.py``). ``--base DIR`` copies an existing tiny model and changes only its
template, so the family variants share one checkpoint and vocabulary. The KV bytes per
token are ``2 * layers * kv_heads * head_dim * dtype_bytes`` and are chosen through the shape
flags.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from sglang_pdd.cache import kv_size
from sglang_pdd.testbed import chat_templates

CHAT_TEMPLATE = chat_templates.DEFAULT
SPECIAL_TOKENS = [
    "<|bos|>",
    "<|eos|>",
    "<|pad|>",
    "<|end|>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
]
_WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at which "
    "but have an they you were her she there been one all we their has would when if so no what "
    "up out them about more can said time only new some could these two may first then do any "
    "like my now over such our man me even most made after also did many before must through "
    "back years where much your way well down should because each just those people how too "
    "little state good very make world still own see men work long get here between both life "
    "being under never day same another know while last might us great old year off come since "
    "against go came right used take three model cache token prefill decode relay main server "
    "request stream latency bandwidth datacenter transfer radix extend handoff batch chunk"
).split()


@dataclass(frozen=True)
class TinyModelConfig:
    """Shape of the generated model; every field maps onto a ``tiny-model`` flag."""

    layers: int = 2
    hidden: int = 64
    heads: int = 4
    kv_heads: int = 2
    vocab: int = 512
    intermediate: int = 128
    max_positions: int = 8192
    seed: int = 0
    # Random weights drawn with a small std make almost-uniform logits and attention: greedy
    # decoding then sits on argmax near-ties and hardly depends on the prompt. Unit-variance
    # weights, sharpened query/key projections and a scaled LM head give clear winners that do
    # depend on the context, which the token-for-token tests need to mean anything.
    init_std: float = 1.0
    attention_sharpness: float = 4.0
    logit_scale: float = 4.0

    def __post_init__(self) -> None:
        for name in ("layers", "hidden", "heads", "kv_heads", "intermediate", "max_positions"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1")
        if self.hidden % self.heads:
            raise ValueError(f"--hidden ({self.hidden}) must be a multiple of --heads")
        if self.heads % self.kv_heads:
            raise ValueError(f"--heads ({self.heads}) must be a multiple of --kv-heads")
        if self.vocab < 300:
            raise ValueError(f"--vocab must be >= 300 (256 bytes + specials), got {self.vocab}")
        for name in ("init_std", "attention_sharpness", "logit_scale"):
            if getattr(self, name) <= 0:
                raise ValueError(f"--{name.replace('_', '-')} must be > 0")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """KV-cache bytes one token occupies (K and V, all layers)."""
        return kv_size.kv_bytes_per_token(self.layers, self.kv_heads, self.head_dim, dtype_bytes)


def _corpus(seed: int, lines: int = 4000) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(_WORDS) for _ in range(rng.randint(5, 30))) for _ in range(lines)]


def _write_tokenizer(cfg: TinyModelConfig, out: Path, chat_template: str = CHAT_TEMPLATE) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=cfg.vocab,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(cfg.seed), trainer=trainer)
    if (got := tok.get_vocab_size()) != cfg.vocab:
        # The corpus is a small word list: BPE runs out of merges before a large vocabulary.
        raise ValueError(
            f"--vocab {cfg.vocab}: the generated tokenizer's corpus yields {got} "
            f"tokens (256 bytes, {len(SPECIAL_TOKENS)} specials and every merge of "
            f"its word list); ask for --vocab {got} or less"
        )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|bos|>",
        eos_token="<|eos|>",
        pad_token="<|pad|>",
        additional_special_tokens=SPECIAL_TOKENS[3:],
    )
    fast.chat_template = chat_template
    fast.model_max_length = cfg.max_positions
    fast.save_pretrained(out)


def write_tiny_model(out: str | Path, cfg: TinyModelConfig, family: str = "default") -> Path:
    """Write model weights, config and tokenizer for ``cfg`` into ``out`` (the chat template
    of ``family``, a key of ``chat_templates.FAMILIES``) and return the path."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    _write_tokenizer(cfg, out, _family_template(family))
    tokenizer = AutoTokenizer.from_pretrained(out)
    model_cfg = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden,
        intermediate_size=cfg.intermediate,
        num_hidden_layers=cfg.layers,
        num_attention_heads=cfg.heads,
        num_key_value_heads=cfg.kv_heads,
        max_position_embeddings=cfg.max_positions,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        initializer_range=cfg.init_std,
        torch_dtype="bfloat16",
    )
    torch.manual_seed(cfg.seed)
    model = LlamaForCausalLM(model_cfg)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() == 1:  # norm weights stay at 1
                continue
            std = cfg.init_std / (1.0 if "embed" in name else param.shape[1] ** 0.5)
            if "q_proj" in name or "k_proj" in name:
                std *= cfg.attention_sharpness**0.5
            elif "lm_head" in name:
                std *= cfg.logit_scale
            param.normal_(0.0, std)
    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    (out / "tiny_model.json").write_text(
        json.dumps({**asdict(cfg), "kv_bytes_per_token_bf16": cfg.kv_bytes_per_token()}, indent=2)
    )
    return out


def _family_template(family: str) -> str:
    if family not in chat_templates.FAMILIES:
        raise ValueError(
            f"--chat-template {family!r}: choose one of {', '.join(chat_templates.FAMILIES)}"
        )
    return chat_templates.FAMILIES[family][0]


def write_chat_variant(base: str | Path, out: str | Path, family: str) -> Path:
    """Copy the tiny model at ``base`` into ``out`` with ``family``'s chat template (weights,
    vocabulary and ids unchanged: a server of either serves the other's token ids) and return
    the path."""
    from transformers import AutoTokenizer

    template = _family_template(family)
    out = Path(out)
    shutil.copytree(base, out, dirs_exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(out)
    tokenizer.chat_template = template
    tokenizer.save_pretrained(out)
    return out


def main(argv: list[str]) -> int:
    """Entry point of ``sglang-pdd tiny-model``."""
    defaults = TinyModelConfig()
    parser = argparse.ArgumentParser(prog="sglang-pdd tiny-model", description=__doc__)
    parser.add_argument("--out", required=True, help="directory to write the model into")
    parser.add_argument("--layers", type=int, default=defaults.layers)
    parser.add_argument("--hidden", type=int, default=defaults.hidden)
    parser.add_argument("--heads", type=int, default=defaults.heads)
    parser.add_argument("--kv-heads", type=int, default=defaults.kv_heads)
    parser.add_argument("--vocab", type=int, default=defaults.vocab)
    parser.add_argument("--intermediate", type=int, default=defaults.intermediate)
    parser.add_argument("--max-positions", type=int, default=defaults.max_positions)
    parser.add_argument("--init-std", type=float, default=defaults.init_std)
    parser.add_argument("--attention-sharpness", type=float, default=defaults.attention_sharpness)
    parser.add_argument("--logit-scale", type=float, default=defaults.logit_scale)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument(
        "--chat-template",
        choices=list(chat_templates.FAMILIES),
        default="default",
        help="the chat template: the tiny model's own, or one in a model family's style "
        "(its tool-call parser: sglang_pdd/testbed/chat_templates.py)",
    )
    parser.add_argument(
        "--base",
        help="copy this tiny model (weights and tokenizer) and change only its chat template; "
        "the shape flags are then ignored",
    )
    args = parser.parse_args(argv)
    if args.base:
        path = write_chat_variant(args.base, args.out, args.chat_template)
        print(f"wrote {path} ({args.chat_template} chat template)")
        return 0
    try:
        cfg = TinyModelConfig(
            layers=args.layers,
            hidden=args.hidden,
            heads=args.heads,
            kv_heads=args.kv_heads,
            vocab=args.vocab,
            intermediate=args.intermediate,
            max_positions=args.max_positions,
            seed=args.seed,
            init_std=args.init_std,
            logit_scale=args.logit_scale,
            attention_sharpness=args.attention_sharpness,
        )
    except ValueError as exc:
        parser.error(str(exc))
    try:
        path = write_tiny_model(args.out, cfg, args.chat_template)
    except ValueError as exc:
        parser.error(str(exc))
    print(f"wrote {path} ({cfg.kv_bytes_per_token()} KV bytes/token in bf16)")
    return 0
