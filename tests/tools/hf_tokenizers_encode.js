// The reference encoder for shardtrain's tokenizer.json reader: Hugging Face's tokenizers (its
// Rust library through Node bindings, npm `tokenizers`, which tools/setup.sh installs), the
// library Python's transformers encodes with. Writes the token ids as a JSON array.
//
//   node hf_tokenizers_encode.js TOKENIZER_JSON IN OUT [--separator LINE --document-start ID]
//   node hf_tokenizers_encode.js TOKENIZER_JSON --decode IDS_JSON OUT
//
// Without --separator the text is one stream. With it, documents are the lines between lines
// holding exactly LINE (a "\r" before the "\n" ignored; empty ones skipped), as
// `shardtrain tokenize --separator` cuts them; each is encoded alone after the id ID. Texts are
// encoded without the post-processor's special tokens (add_special_tokens false). --decode
// writes the text of the ids (special tokens kept) instead, as a JSON string.
"use strict";
const fs = require("fs");
const path = require("path");
const { Tokenizer } = require(path.join(__dirname, "../../third_party/npm/node_modules/tokenizers"));

const args = process.argv.slice(2);
const option = (name, fallback) => {
  const i = args.indexOf(name);
  if (i < 0) return fallback;
  const value = args[i + 1];
  args.splice(i, 2);
  return value;
};
const separator = option("--separator", null);
const documentStart = Number(option("--document-start", "-1"));
const decodeFrom = option("--decode", null);
const [tokenizerFile, input, output] = decodeFrom === null ? args : [args[0], null, args[1]];
const tokenizer = Tokenizer.fromFile(tokenizerFile);

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

(async () => {
  if (decodeFrom !== null) {
    const ids = JSON.parse(fs.readFileSync(decodeFrom, "utf8"));
    fs.writeFileSync(output, JSON.stringify(await tokenizer.decode(ids, false)));
    return;
  }
  const encode = async (text) => (await tokenizer.encode(text, null, { addSpecialTokens: false })).getIds();
  // The files are UTF-8 (the tests' texts are).
  const text = fs.readFileSync(input, "utf8");
  let ids = [];
  if (separator === null) {
    ids = await encode(text);
  } else {
    if (documentStart < 0) throw new Error("--separator needs --document-start");
    for (const doc of documents(text)) {
      ids.push(documentStart);
      for (const id of await encode(doc)) ids.push(id);
    }
  }
  fs.writeFileSync(output, JSON.stringify(Array.from(ids)));
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
