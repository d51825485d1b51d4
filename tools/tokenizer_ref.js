#!/usr/bin/env node
// Reference tokenizer for colibri's tests: runs the npm package
// @lenml/tokenizers (a fork of transformers.js) on a tokenizer.json +
// tokenizer_config.json and writes what it produces, so the C tokenizer and
// chat templates can be compared with an independent implementation.
//
//   node tools/tokenizer_ref.js IN.json OUT.json
//
// IN:  { "model_dir": "DIR",                      // holds tokenizer.json (+ tokenizer_config.json)
//        "encode": ["text", ...],                 // ids, no BOS/EOS added
//        "roundtrip": bool,                       // also decode each encoding
//        "decode": [[id, ...], ...],              // text, special tokens kept
//        "chat":   [{ "messages": [{role, content}, ...],
//                     "add_generation_prompt": bool,
//                     "chat_template": "optional template text",
//                     "kwargs": { extra template variables } }, ...] }
// OUT: { "encode": [[id, ...]], "roundtrip": ["text"], "decode": ["text"],
//        "chat": [{"text": s} | {"error": s}] }
//
// A chat entry the package cannot render (its Jinja subset lacks some
// syntax, e.g. Qwen3's `set ns.attr`) yields {"error": message}. Offline only.
'use strict';

const fs = require('fs');
const path = require('path');
const { TokenizerLoader } = require('@lenml/tokenizers');

function main() {
  const [inPath, outPath] = process.argv.slice(2);
  if (!inPath || !outPath) {
    process.stderr.write('usage: tokenizer_ref.js IN.json OUT.json\n');
    process.exit(2);
  }
  const req = JSON.parse(fs.readFileSync(inPath, 'utf8'));
  const dir = req.model_dir;
  const tokenizerJSON = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8'));
  // tokenizer.json may omit components; the package wants them present (null).
  for (const k of ['normalizer', 'pre_tokenizer', 'post_processor', 'decoder'])
    if (!(k in tokenizerJSON)) tokenizerJSON[k] = null;
  if (!tokenizerJSON.added_tokens) tokenizerJSON.added_tokens = [];
  const cfgPath = path.join(dir, 'tokenizer_config.json');
  const tokenizerConfig = fs.existsSync(cfgPath) ? JSON.parse(fs.readFileSync(cfgPath, 'utf8')) : {};
  const tok = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });

  // The package refuses to decode an empty list; the answer is the empty string.
  const decode = (ids) => ids.length === 0 ? ''
    : tok.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
  const out = { encode: [], roundtrip: [], decode: [], chat: [] };
  for (const text of req.encode || []) {
    const ids = Array.from(tok.encode(text, { add_special_tokens: false }));
    out.encode.push(ids);
    if (req.roundtrip) out.roundtrip.push(decode(ids));
  }
  for (const ids of req.decode || [])
    out.decode.push(decode(ids));
  for (const c of req.chat || []) {
    try {
      const opts = Object.assign({ tokenize: false, add_generation_prompt: !!c.add_generation_prompt },
                                 c.kwargs || {});
      if (c.chat_template) opts.chat_template = c.chat_template;
      out.chat.push({ text: tok.apply_chat_template(c.messages, opts) });
    } catch (e) {
      out.chat.push({ error: String(e && e.message ? e.message : e) });
    }
  }
  fs.writeFileSync(outPath, JSON.stringify(out));
}

// The package's errors would print its minified source; print the message only.
try {
  main();
} catch (e) {
  process.stderr.write('tokenizer_ref.js: ' + String(e && e.message ? e.message : e) + '\n');
  process.exit(1);
}
