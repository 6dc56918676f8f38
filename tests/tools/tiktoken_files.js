// Writes the tokenizer files of tiktoken's cl100k_base encoding (from the npm package tiktoken,
// which tools/setup.sh installs) in the two formats shardtrain reads, for the tests:
//   OUT_DIR/cl100k_base.tiktoken  tiktoken's rank file: base64 of each token's bytes, its rank
//   OUT_DIR/tokenizer.json        Hugging Face's format: the vocabulary in GPT-2's byte
//                                 alphabet, one merge per merged token in rank order, the Split
//                                 pre-tokenizer with cl100k's pattern, the special tokens
//
//   node tiktoken_files.js OUT_DIR
//
// The merges are every split of each token into two tokens of the vocabulary, the token's splits
// in its rank order and among them by the parts' ranks: what transformers' TikTokenConverter writes
// (Llama 3's tokenizer.json has 280147 merges for 128000 tokens). Hugging Face's BPE merges only
// the pairs listed; tiktoken merges any pair whose bytes form a token, and with every split listed
// the two agree.
"use strict";
const fs = require("fs");
const path = require("path");
const encoding = require(path.join(__dirname, "../../third_party/npm/node_modules/tiktoken/encoders/cl100k_base.json"));

const out = process.argv[2];
if (!out) throw new Error("usage: node tiktoken_files.js OUT_DIR");
fs.mkdirSync(out, { recursive: true });

// bpe_ranks: "! FIRST_RANK tok tok ..." segments (one per line), tokens in base64 at consecutive ranks.
const tokens = [];  // [bytes (Buffer), rank]
for (const line of encoding.bpe_ranks.split("\n")) {
  const words = line.split(" ").filter((w) => w.length > 0);
  if (words.length === 0) continue;
  if (words[0] !== "!") throw new Error("unexpected bpe_ranks segment: " + line.slice(0, 40));
  let rank = Number(words[1]);
  for (const w of words.slice(2)) tokens.push([Buffer.from(w, "base64"), rank++]);
}
fs.writeFileSync(path.join(out, "cl100k_base.tiktoken"),
                 tokens.map(([b, r]) => `${b.toString("base64")} ${r}\n`).join(""));

// GPT-2's byte alphabet (bytes_to_unicode).
const alphabet = new Array(256);
let next = 256;
for (let b = 0; b < 256; b++) {
  const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  alphabet[b] = String.fromCodePoint(printable ? b : next++);
}
const spell = (buf) => Array.from(buf, (b) => alphabet[b]).join("");

const rankOf = new Map(tokens.map(([b, r]) => [b.toString("latin1"), r]));
const vocab = {};
const merges = [];
let unsplittable = 0;
for (const [bytes, rank] of tokens.slice().sort((a, b) => a[1] - b[1])) {
  vocab[spell(bytes)] = rank;
  if (bytes.length < 2) continue;
  const splits = [];  // [left rank, right rank, left, right]
  for (let k = 1; k < bytes.length; k++) {
    const left = bytes.subarray(0, k), right = bytes.subarray(k);
    const l = rankOf.get(left.toString("latin1")), r = rankOf.get(right.toString("latin1"));
    if (l !== undefined && r !== undefined) splits.push([l, r, left, right]);
  }
  if (!splits.some(([l, r]) => l < rank && r < rank)) unsplittable++;
  splits.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  for (const [, , left, right] of splits) merges.push([spell(left), spell(right)]);
}
const added = Object.entries(encoding.special_tokens).map(([content, id]) => ({
  id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true,
}));
const tokenizer = {
  version: "1.0",
  truncation: null,
  padding: null,
  added_tokens: added,
  normalizer: null,
  pre_tokenizer: {
    type: "Sequence",
    pretokenizers: [
      { type: "Split", pattern: { Regex: encoding.pat_str }, behavior: "Isolated", invert: false },
      { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false },
    ],
  },
  post_processor: null,
  decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
  model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
           fuse_unk: false, byte_fallback: false, ignore_merges: true, vocab, merges },
};
fs.writeFileSync(path.join(out, "tokenizer.json"), JSON.stringify(tokenizer));
console.log(`cl100k_base: ${tokens.length} ranked tokens, ${merges.length} merges (${unsplittable} tokens without ` +
            `a split into two lower-ranked tokens), ${added.length} special tokens; written to ${out}`);
