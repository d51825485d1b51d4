// ollama_client — drives a running `colibri serve` with the official ollama
// npm client (tools/node_modules/ollama, ollama-js), as a script written for
// an Ollama server would: version, list, show, ps, chat (whole and
// streamed), generate with options (a seed reproduces the text, num_predict
// and stop are honoured), structured output (format), and the errors it
// raises: embed refused, an unknown model. Run by tests/test_serve_ollama.c:
//   node tests/serve/ollama_client.mjs HOST MODEL_ID API_KEY CTX
// Prints one line per check and exits non-zero at the first failure.
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, '..', '..', 'tools', 'package.json'));
const { Ollama } = require('ollama');

const [host, model, apiKey, ctx] = process.argv.slice(2);
const ollama = new Ollama({ host, headers: { Authorization: `Bearer ${apiKey}` } });

function check(cond, what) {
  if (!cond) {
    console.log(`FAIL ${what}`);
    process.exit(1);
  }
  console.log(`ok ${what}`);
}

async function refused(call) {
  try {
    await call();
  } catch (e) {
    return e;
  }
  return null;
}

const version = await ollama.version();
check(typeof version.version === 'string' && /^\d+\.\d+\.\d+$/.test(version.version), 'version');

const list = await ollama.list();
const tagged = `${model}:latest`;
check(list.models.length === 1 && list.models[0].name === tagged && list.models[0].details.family === 'qwen3_moe' &&
      list.models[0].size > 0, 'list names the model with its details');
const ps = await ollama.ps();
check(ps.models.length === 1 && ps.models[0].name === tagged && ps.models[0].context_length === Number(ctx),
      'ps: the model, loaded, with the server\'s context');
const show = await ollama.show({ model: tagged });
check(show.capabilities.includes('completion') && show.capabilities.includes('tools') &&
      show.model_info['general.architecture'] === 'qwen3_moe' && show.details.parameter_size.length > 0,
      'show gives capabilities, model_info and details');

const messages = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Say hello.' }];
const chat = await ollama.chat({ model, messages, options: { num_predict: 8, temperature: 0 } });
check(chat.done === true && chat.done_reason === 'length' && chat.eval_count === 8 && chat.prompt_eval_count > 0 &&
      chat.message.role === 'assistant' && chat.message.content.length > 0 && chat.total_duration > 0 &&
      chat.model === model, 'chat gives the message and the final statistics');

const stream = await ollama.chat({ model, messages, stream: true, options: { num_predict: 8, temperature: 0 } });
let streamed = '', parts = 0, last = null;
for await (const part of stream) {
  streamed += part.message.content;
  parts++;
  last = part;
}
check(streamed === chat.message.content && parts > 2 && last.done && last.done_reason === 'length' &&
      last.eval_count === 8, 'a streamed chat gives the same text, then done');

const prompt = 'Once upon a time';
const sampled = (seed) => ollama.generate({ model, prompt, options: { seed, temperature: 1, num_predict: 12 } });
const [a, b, c] = [await sampled(42), await sampled(42), await sampled(43)];
check(a.response === b.response && a.response !== c.response, 'generate: options.seed reproduces the text');
check(a.eval_count === 12 && a.done_reason === 'length', 'generate: options.num_predict is honoured');

const greedy = await ollama.generate({ model, prompt, raw: true, options: { temperature: 0, num_predict: 16 } });
const text = greedy.response;
const stop = [...text.slice(0, text.length / 2)].slice(-2).join('');
const at = text.indexOf(stop);
check(at > 0 && !stop.includes('\ufffd'), `a stop string from the greedy text: ${JSON.stringify(stop)}`);
const stopped = await ollama.generate({ model, prompt, raw: true, options: { temperature: 0, num_predict: 16, stop: [stop] } });
check(stopped.response === text.slice(0, at) && stopped.done_reason === 'stop', 'generate: options.stop is honoured');

const schema = {
  type: 'object',
  properties: { city: { type: 'string', maxLength: 8 }, days: { type: 'integer', minimum: 1, maximum: 7 } },
  required: ['city', 'days'],
  additionalProperties: false,
};
const structured = await ollama.chat({ model, messages, format: schema, options: { temperature: 1, seed: 7, num_predict: 100 } });
const obj = JSON.parse(structured.message.content);
check(typeof obj.city === 'string' && obj.city.length <= 8 && Number.isInteger(obj.days) && obj.days >= 1 &&
      obj.days <= 7 && Object.keys(obj).length === 2, 'format: a JSON schema gives JSON of the schema');
const json = await ollama.generate({ model, prompt: 'JSON:', format: 'json', options: { temperature: 0, num_predict: 3 } });
check(json.response.startsWith('{'), 'format: "json" starts an object');

const embed = await refused(() => ollama.embed({ model, input: 'hello' }));
check(embed && embed.status_code === 400 && /does not support embeddings/.test(embed.error), `embed is refused: ${embed?.error}`);
const unknown = await refused(() => ollama.chat({ model: 'llama3.2', messages }));
check(unknown && unknown.status_code === 404 && unknown.error === "model 'llama3.2' not found",
      `an unknown model is a 404: ${unknown?.error}`);
const badStream = await refused(async () => {
  for await (const part of await ollama.generate({ model: 'llama3.2', prompt, stream: true })) void part;
});
check(badStream && badStream.status_code === 404, 'and so it is for a stream');

console.log('all checks passed');
