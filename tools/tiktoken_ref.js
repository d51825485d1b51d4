#!/usr/bin/env node
// Reference tokenizer of gpt-oss for colibri's tests: runs the npm package
// gpt-tokenizer (an independent JavaScript implementation of tiktoken) with
// its o200k_harmony encoding and writes what it produces, so the C
// tokenizer, loaded from the tokenizer.json that tools/tiktoken_to_hf.py
// builds from the same ranks, can be compared with it.
//
//   node tools/tiktoken_ref.js IN.json OUT.json
//
// IN:  { "encode": ["text", ...],      // ids; every special token in the text is one id
//        "roundtrip": bool,            // also decode each encoding
//        "decode": [[id, ...], ...] }  // text, special tokens written out
// OUT: { "encode": [[id, ...]], "roundtrip": ["text"], "decode": ["text"] }
//
// Special tokens are found here, by the package's own pattern of all of
// them, and the text between them goes to encode() without specials:
// gpt-tokenizer 4.0.0's encode(text, { allowedSpecial: 'all' }) finds a
// special token only at the very start of the text (its special-token
// regex is sticky, and the match index is then offset twice), so
// encode('a<|end|>', { allowedSpecial: 'all' }) spells <|end|> out as text.
// Offline only.
'use strict';

const fs = require('fs');
const enc = require('gpt-tokenizer/cjs/encoding/o200k_harmony').default;

function encodeWithSpecials(text) {
  const re = new RegExp(enc.allSpecialTokenRegex.source, 'gu');
  const ids = [];
  let start = 0;
  for (const m of text.matchAll(re)) {
    if (m.index > start) ids.push(...enc.encode(text.slice(start, m.index)));
    const id = enc.specialTokensEncoder.get(m[0]);
    if (id === undefined) throw new Error(`no id for special token ${m[0]}`);
    ids.push(id);
    start = m.index + m[0].length;
  }
  if (start < text.length) ids.push(...enc.encode(text.slice(start)));
  return ids;
}

function main() {
  const [inPath, outPath] = process.argv.slice(2);
  if (!inPath || !outPath) {
    process.stderr.write('usage: tiktoken_ref.js IN.json OUT.json\n');
    process.exit(2);
  }
  const req = JSON.parse(fs.readFileSync(inPath, 'utf8'));
  const out = { encode: [], roundtrip: [], decode: [] };
  for (const text of req.encode || []) {
    const ids = encodeWithSpecials(text);
    out.encode.push(ids);
    if (req.roundtrip) out.roundtrip.push(enc.decode(ids));
  }
  for (const ids of req.decode || [])
    out.decode.push(enc.decode(ids));
  fs.writeFileSync(outPath, JSON.stringify(out));
}

try {
  main();
} catch (e) {
  process.stderr.write('tiktoken_ref.js: ' + String(e && e.message ? e.message : e) + '\n');
  process.exit(1);
}
