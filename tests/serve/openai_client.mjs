// openai_client — drives a running `colibri serve` with the official openai
// npm client (tools/node_modules/openai), as a user's script would: models,
// chat, a streamed chat, completions, structured output (response_format
// json_schema), a forced tool call (tools + tool_choice required), and errors. Run by tests/test_serve.c:
//   node tests/serve/openai_client.mjs BASE_URL MODEL_ID API_KEY
// Prints one line per check and exits non-zero at the first failure.
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, '..', '..', 'tools', 'package.json'));
const { default: OpenAI } = require('openai');

const [baseURL, model, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 120000 });

function check(cond, what) {
  if (!cond) {
    console.log(`FAIL ${what}`);
    process.exit(1);
  }
  console.log(`ok ${what}`);
}

const models = await client.models.list();
check(models.data.length === 1 && models.data[0].id === model, 'models.list names the model');
const one = await client.models.retrieve(model);
check(one.id === model && one.object === 'model', 'models.retrieve');

const messages = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Say hello.' }];
const chat = await client.chat.completions.create({ model, messages, max_tokens: 12, temperature: 0 });
const text = chat.choices[0].message.content;
check(typeof text === 'string' && text.length > 0, 'chat.completions.create gives text');
check(chat.usage.completion_tokens === 12 && chat.choices[0].finish_reason === 'length', 'chat usage and finish_reason');

const stream = await client.chat.completions.create({
  model, messages, max_tokens: 12, temperature: 0, stream: true, stream_options: { include_usage: true },
});
let streamed = '', usage = null, finish = null;
for await (const chunk of stream) {
  if (chunk.usage) usage = chunk.usage;
  for (const c of chunk.choices) {
    streamed += c.delta?.content ?? '';
    finish = c.finish_reason ?? finish;
  }
}
check(streamed === text, 'a streamed chat gives the same text');
check(usage && usage.completion_tokens === 12 && finish === 'length', 'stream usage chunk and finish_reason');

const comp = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 8, temperature: 0 });
check(typeof comp.choices[0].text === 'string' && comp.usage.completion_tokens === 8, 'completions.create');

const schema = {
  type: 'object',
  properties: { city: { type: 'string', maxLength: 8 }, days: { type: 'integer', minimum: 1, maximum: 7 } },
  required: ['city', 'days'],
  additionalProperties: false,
};
const structured = await client.chat.completions.create({
  model, messages, max_tokens: 200, temperature: 1, seed: 7,
  response_format: { type: 'json_schema', json_schema: { name: 'trip', strict: true, schema } },
});
const obj = JSON.parse(structured.choices[0].message.content);
check(typeof obj.city === 'string' && obj.city.length <= 8 && Number.isInteger(obj.days) && obj.days >= 1 &&
      obj.days <= 7 && Object.keys(obj).length === 2, 'response_format json_schema gives JSON of the schema');

const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather of a city', parameters: schema } }];
const called = await client.chat.completions.create({
  model, messages, max_tokens: 200, temperature: 1, seed: 7, tools, tool_choice: 'required',
});
const call = called.choices[0].message.tool_calls?.[0];
const args = call ? JSON.parse(call.function.arguments) : null;
check(called.choices[0].finish_reason === 'tool_calls' && call.type === 'function' &&
      call.function.name === 'get_weather' && typeof args.city === 'string' && Number.isInteger(args.days),
      'tool_choice required gives a tool call with arguments of the schema');

try {
  await client.chat.completions.create({ model, messages, temperature: 'hot' });
  check(false, 'a bad temperature is refused');
} catch (e) {
  check(e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'temperature',
        'a bad temperature is a BadRequestError naming the param');
}
try {
  await client.chat.completions.create({ model: 'no-such-model', messages });
  check(false, 'an unknown model is refused');
} catch (e) {
  check(e instanceof OpenAI.NotFoundError && e.code === 'model_not_found', 'an unknown model is a NotFoundError');
}
console.log('openai client: all checks passed');
