#!/usr/bin/env python3
"""Writes a small random-weight llama model as GGUF, with a matching tokenizer.json.

Nothing can be downloaded on the GPU machine, so the proof makes its own model with the
`gguf` package of the llama.cpp tree it builds. The weights are random; what matters is that
llama.cpp loads the file, splits it over its devices and generates tokens at the speed a
model of this shape runs.

The vocabulary is byte-level BPE in GPT-2's spelling, restricted to printable ASCII, tab and
newline, plus a few merges (llama.cpp refuses a BPE vocabulary without merges). Every token
decodes to ASCII, so whatever the random model generates is valid UTF-8 and the server's
output parser accepts it. The end-of-text token's output row is zero while the others give
logits with a spread of about ten, so the model practically never stops on its own and a
request gets the number of tokens it asked for.

tokenizer.json holds the same vocabulary and merges, for benchmark clients that count tokens
with the model's tokenizer. corpus.txt is plain ASCII text for their prompts.

Usage: make_tiny_gguf.py GGUF_PY_DIR OUT_DIR [--layers N] [--embd N] [--ff N]
"""

import argparse
import json
import os
import sys

import numpy as np


def byte_to_unicode():
    """GPT-2's reversible byte -> printable character table."""
    bs = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


WORDS = (
    "the of and to in is was that for on with as by at from his her he she it they "
    "an be this which or had not are but were have one all their there been when who "
    "will more no if out so said what up its about into than them can only other new "
    "some could time these two may then do first any my now such like our over man me "
    "even most made after also did many before must through back years where much your "
    "way well down should because each just those people how too little state good very "
    "make world still own see men work long get here between both life being under never"
).split()


def build_vocab():
    b2u = byte_to_unicode()
    allowed = [9, 10] + list(range(32, 127))
    tokens = [b2u[b] for b in allowed]
    merges = []
    have = set(tokens)

    def merge(a, b):
        if a in have and b in have and a + b not in have:
            merges.append(f"{a} {b}")
            tokens.append(a + b)
            have.add(a + b)

    # Merge each word left to right, then with its leading space ("Ġ").
    for word in WORDS:
        acc = word[0]
        for ch in word[1:]:
            merge(acc, ch)
            acc += ch
        merge("Ġ", word)
    return tokens, merges


def corpus_text():
    rng = np.random.default_rng(7)
    lines = []
    for _ in range(4000):
        n = int(rng.integers(6, 18))
        words = [WORDS[int(i)] for i in rng.integers(0, len(WORDS), n)]
        lines.append(" ".join(words).capitalize() + ".")
    return "\n".join(lines) + "\n"


def tokenizer_json(tokens, merges, eos_id):
    vocab = {t: i for i, t in enumerate(tokens)}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": eos_id,
                "content": "<|endoftext|>",
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
        ],
        "normalizer": None,
        "pre_tokenizer": {
            "type": "ByteLevel",
            "add_prefix_space": False,
            "trim_offsets": True,
            "use_regex": True,
        },
        "post_processor": None,
        "decoder": {
            "type": "ByteLevel",
            "add_prefix_space": True,
            "trim_offsets": True,
            "use_regex": True,
        },
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": merges,
        },
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf_py")
    ap.add_argument("out_dir")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--embd", type=int, default=2048)
    ap.add_argument("--ff", type=int, default=5632)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--ctx", type=int, default=4096)
    args = ap.parse_args()

    sys.path.insert(0, args.gguf_py)
    import gguf  # noqa: E402  (from the llama.cpp tree being tested)

    os.makedirs(args.out_dir, exist_ok=True)
    tokens, merges = build_vocab()
    eos_id = len(tokens)
    tokens.append("<|endoftext|>")
    n_vocab = len(tokens)
    types = [gguf.TokenType.NORMAL] * (n_vocab - 1) + [gguf.TokenType.CONTROL]

    e, ff, L = args.embd, args.ff, args.layers
    head_dim = e // args.heads
    kv = head_dim * args.kv_heads
    rng = np.random.default_rng(1234)

    def mat(rows, cols, std):
        return (rng.standard_normal((rows, cols), dtype=np.float32) * std).astype(np.float16)

    path = os.path.join(args.out_dir, "tiny-llama-f16.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("tiny-random-llama")
    w.add_context_length(args.ctx)
    w.add_embedding_length(e)
    w.add_block_count(L)
    w.add_feed_forward_length(ff)
    w.add_head_count(args.heads)
    w.add_head_count_kv(args.kv_heads)
    w.add_rope_dimension_count(head_dim)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(n_vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(eos_id)
    w.add_eos_token_id(eos_id)
    w.add_add_bos_token(False)

    w.add_tensor("token_embd.weight", mat(n_vocab, e, 1.0))
    for i in range(L):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(e, dtype=np.float32))
        w.add_tensor(p + "attn_q.weight", mat(e, e, 0.5 / np.sqrt(e)))
        w.add_tensor(p + "attn_k.weight", mat(kv, e, 0.5 / np.sqrt(e)))
        w.add_tensor(p + "attn_v.weight", mat(kv, e, 0.5 / np.sqrt(e)))
        w.add_tensor(p + "attn_output.weight", mat(e, e, 0.5 / np.sqrt(e)))
        w.add_tensor(p + "ffn_norm.weight", np.ones(e, dtype=np.float32))
        w.add_tensor(p + "ffn_gate.weight", mat(ff, e, 0.5 / np.sqrt(e)))
        w.add_tensor(p + "ffn_up.weight", mat(ff, e, 0.5 / np.sqrt(e)))
        w.add_tensor(p + "ffn_down.weight", mat(e, ff, 0.5 / np.sqrt(ff)))
    w.add_tensor("output_norm.weight", np.ones(e, dtype=np.float32))
    out = mat(n_vocab, e, 10.0 / np.sqrt(e))
    out[eos_id, :] = 0
    w.add_tensor("output.weight", out)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    with open(os.path.join(args.out_dir, "tokenizer.json"), "w") as f:
        json.dump(tokenizer_json(tokens, merges, eos_id), f)
    with open(os.path.join(args.out_dir, "corpus.txt"), "w") as f:
        f.write(corpus_text())
    size = os.path.getsize(path)
    print(f"wrote {path}: {size / 2**20:.0f} MiB, vocab {n_vocab} ({len(merges)} merges), "
          f"{L} layers, embd {e}, ff {ff}")


if __name__ == "__main__":
    main()
