// The reference encoder for shardtrain's byte-level BPE tokenizers: OpenAI's tiktoken (its Rust
// core compiled to WebAssembly, from npm), encoding "gpt2" or, with --encoding, another
// ("cl100k_base"). Writes an llm.c token file (256 x int32 header: 20240520, 1, token count;
// then uint16 tokens; for cl100k_base's 100277 ids: 20240801, 7, count, then uint32 tokens) that
// `shardtrain tokenize` must equal byte for byte, and prints the encoding time.
//
//   node tiktoken_encode.js IN [OUT] [--separator LINE] [--encoding NAME]
//
// Without --separator the text is one stream (encode_ordinary of the whole file). With it,
// documents are the lines between lines holding exactly LINE (a "\r" before the "\n" ignored),
// empty ones skipped; each is encoded alone after <|endoftext|> (50256; cl100k_base: 100257). The time printed is the
// encoding's alone, after a warm-up encode of another short text (so that compiling the
// WebAssembly is not in it).
"use strict";
const fs = require("fs");
const path = require("path");
const { get_encoding } = require(path.join(__dirname, "../../third_party/npm/node_modules/tiktoken"));

const args = process.argv.slice(2);
const option = (name, fallback) => {
  const i = args.indexOf(name);
  if (i < 0) return fallback;
  const value = args[i + 1];
  args.splice(i, 2);
  return value;
};
const separator = option("--separator", null);
const encoding = option("--encoding", "gpt2");
const [input, output] = args;
// tiktoken takes JavaScript strings: the file must be UTF-8 (the tests' texts are).
const text = fs.readFileSync(input, "utf8");

function documents(text) {
  const docs = [];
  let start = 0;
  for (let line = 0; line < text.length;) {
    const newline = text.indexOf("\n", line);
    const next = newline < 0 ? text.length : newline + 1;
    let content = text.slice(line, newline < 0 ? text.length : newline);
    if (content.endsWith("\r")) content = content.slice(0, -1);
    if (content === separator) {
      if (line > start) docs.push(text.slice(start, line));
      start = next;
    }
    line = next;
  }
  if (text.length > start) docs.push(text.slice(start));
  return docs;
}

const enc = get_encoding(encoding);
const endOfText = enc.encode("<|endoftext|>", "all")[0];
const wide = encoding !== "gpt2" && encoding !== "r50k_base";
enc.encode_ordinary("A warm-up text: 123 words, don't time it!\n");
const begin = process.hrtime.bigint();
let ids;
if (separator === null) {
  ids = enc.encode_ordinary(text);
} else {
  const parts = [];
  for (const doc of documents(text)) {
    parts.push(Uint32Array.of(endOfText));
    parts.push(enc.encode_ordinary(doc));
  }
  let n = 0;
  for (const p of parts) n += p.length;
  ids = new Uint32Array(n);
  let at = 0;
  for (const p of parts) ids.set(p, at), (at += p.length);
}
const seconds = Number(process.hrtime.bigint() - begin) / 1e9;
enc.free();
console.log(`tiktoken: ${Buffer.byteLength(text, "utf8")} bytes into ${ids.length} tokens in ${seconds.toFixed(3)} s`);

if (output) {
  const header = new Int32Array(256);
  header[0] = wide ? 20240801 : 20240520;
  header[1] = wide ? 7 : 1;
  header[2] = ids.length;
  const body = wide ? Uint32Array.from(ids) : Uint16Array.from(ids);
  fs.writeFileSync(output, Buffer.concat([Buffer.from(header.buffer), Buffer.from(body.buffer)]));
}
