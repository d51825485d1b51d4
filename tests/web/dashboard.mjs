// dashboard — drives the web dashboard of a running `colibri serve` in
// headless Chromium (Debian's chromium through puppeteer-core from
// tools/node_modules), using only the page's test hooks and public routes
// (docs/DASHBOARD.md, "Test hooks"):
//  (a) the page loads with no console error or warning, no page error, no
//      failed request and no HTTP error, for the whole run;
//  (b) state events arrive (window.colibri.events grows, about once a second
//      when idle);
//  (c) a chat message streams: the answer grows in at least two steps before
//      data-done="1", it is the text the API gives for the same request, and
//      the timings show numbers; Stop on a long answer ends it with
//      data-done="stopped", the server frees the slot and answers the next
//      message;
//  (d) when idle, every [data-metric] element's data-value is the sample of
//      the same name in GET /metrics;
//  (e) the expert map: every cell is written to ARTIFACTS/map.json, which
//      tests/test_web.c compares with the --stats-json report's expert_usage
//      once the server has stopped; hovering a used cell shows #map-tip
//      naming its layer, expert and routed count, moving off hides it;
//  (f) screenshots of the whole page into ARTIFACTS (the README's picture
//      is tools/dashboard_shot.sh's, on the default model);
//  (g) the headlines (issue 39, item 7): the throughput card says "idle"
//      with no request, shows the decode rate while an answer streams, and
//      after one keeps it as "last N tok/s decode", N the answer's own rate
//      within a factor of two (not an average diluted by idle time); the
//      disk card's "since start" never falls, at any state event of the run.
// Run by tests/test_web.c:
//   node tests/web/dashboard.mjs BASE_URL ARTIFACTS CHROMIUM
// Prints one line per check, "all checks passed" at the end, and exits
// non-zero at the first failure, saying what differed.
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, '..', '..', 'tools', 'package.json'));
const puppeteer = require('puppeteer-core');

const [base, artifacts, chromium] = process.argv.slice(2);
if (!base || !artifacts || !chromium) {
  console.log('usage: node tests/web/dashboard.mjs BASE_URL ARTIFACTS CHROMIUM');
  process.exit(2);
}
fs.mkdirSync(artifacts, { recursive: true });
const WIDTH = 1400, HEIGHT = 900;

let browser = null;
async function fail(what) {
  console.log(`FAIL ${what}`);
  if (browser) await browser.close().catch(() => {});
  process.exit(1);
}
async function check(cond, what, why) {
  if (!cond) await fail(why ? `${what}: ${why}` : what);
  console.log(`ok ${what}`);
}
// A run that hangs fails here rather than at the C test's alarm.
setTimeout(() => fail('the browser checks took over 75 s'), 75000).unref();

// Polls fn (in Node) until it gives a truthy value; fails with what() after ms.
async function until(fn, ms, what) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) await fail(typeof what === 'function' ? await what() : what);
    await new Promise((r) => setTimeout(r, 25));
  }
}

// The samples of GET /metrics: name (with labels, as printed) -> the number
// and the text it was printed as.
async function metrics() {
  const r = await fetch(`${base}/metrics`);
  if (r.status !== 200) await fail(`GET /metrics: status ${r.status}`);
  const out = new Map();
  for (const line of (await r.text()).split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const sp = line.lastIndexOf(' ');
    out.set(line.slice(0, sp), { value: Number(line.slice(sp + 1)), text: line.slice(sp + 1) });
  }
  return out;
}
const idle = async () => {
  const m = await metrics();
  return m.get('colibri_active_slots')?.value === 0 && m.get('colibri_queue_length')?.value === 0;
};

browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  args: ['--no-sandbox', '--headless=new', '--disable-gpu', '--disable-dev-shm-usage', `--window-size=${WIDTH},${HEIGHT}`],
});
const page = await browser.newPage();
await page.setViewport({ width: WIDTH, height: HEIGHT });

// (a) Everything that goes wrong in the page, for the whole run. The chat
// request that Stop aborts is the one failure expected.
const problems = [];
let stopping = false;
page.on('console', (m) => {
  if (m.type() === 'error' || m.type() === 'warn' || m.type() === 'warning')
    problems.push(`console ${m.type()}: ${m.text()} (${m.location()?.url ?? ''})`);
});
page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
page.on('requestfailed', (q) => {
  const aborted = q.failure()?.errorText === 'net::ERR_ABORTED';
  if (stopping && aborted && q.url().endsWith('/v1/chat/completions')) return;
  problems.push(`request failed: ${q.method()} ${q.url()}: ${q.failure()?.errorText}`);
});
page.on('response', (r) => {
  if (r.status() >= 400) problems.push(`HTTP ${r.status()}: ${r.request().method()} ${r.url()}`);
});
const chatBodies = [];
page.on('request', (q) => {
  if (q.method() === 'POST' && q.url().endsWith('/v1/chat/completions')) chatBodies.push(q.postData());
});
async function noProblems(when) {
  await check(problems.length === 0, `no console error, page error or failed request ${when}`, '\n  ' + problems.join('\n  '));
}

const t0 = Date.now();
const resp = await page.goto(`${base}/`, { waitUntil: 'load' });
await check(resp.status() === 200 && /text\/html/.test(resp.headers()['content-type'] ?? ''), 'GET / is the page',
  `status ${resp.status()}, content-type ${resp.headers()['content-type']}`);
for (const name of ['style.css', 'app.js', 'chat.js', 'panel.js', 'map.js']) {
  const r = await fetch(`${base}/ui/${name}`);
  await check(r.status === 200, `GET /ui/${name}`, `status ${r.status}`);
}

// (b) The state stream.
await until(() => page.evaluate(() => window.colibri?.state != null && window.colibri.events >= 1), 10000,
  'window.colibri.state never arrived (no state event in 10 s)');
const ev0 = await page.evaluate(() => window.colibri.events);
await until(async () => (await page.evaluate(() => window.colibri.events)) > ev0, 3000,
  `window.colibri.events stayed at ${ev0} for 3 s (one state event a second when idle)`);
const st = await page.evaluate(() => window.colibri.state);
await check(typeof st.seq === 'number' && typeof st.uptime_s === 'number' && typeof st.model === 'string' &&
  st.metrics && st.map && Array.isArray(st.copies), 'the state object has seq, uptime_s, model, metrics, copies, map',
  JSON.stringify(st).slice(0, 400));
const live = await fetch(`${base}/api/state`);
await check(live.status === 200 && /application\/json/.test(live.headers.get('content-type') ?? ''),
  'GET /api/state is JSON', `status ${live.status}, content-type ${live.headers.get('content-type')}`);
await noProblems('after loading');

// (g) The throughput card as the user reads it, and every value the disk
// card's "since start" row takes from here to the end.
const tput = () => page.evaluate(() => {
  const card = [...document.querySelectorAll('.card')].find((c) => c.querySelector('h3')?.textContent === 'Throughput');
  const hero = card?.querySelector('.hero'), unit = card?.querySelector('.unit');
  const ms = window.colibri.state?.metrics ?? {};
  return { hero: hero?.textContent ?? null, unit: unit?.textContent ?? null, value: hero?.getAttribute('data-value'),
    busy: ms.colibri_active_slots > 0 || ms.colibri_queue_length > 0, events: window.colibri.events };
});
const shownRate = (t) => Number((t ?? '').replace(/,/g, ''));
const sameRate = (text, v) => Math.abs(shownRate(text) - v) <= (v >= 100 ? 0.5 : 0.05) + 1e-9;
await until(async () => (await tput()).hero === 'idle', 3000,
  async () => `with no request the throughput card says "${(await tput()).hero} ${(await tput()).unit}", not "idle"`);
console.log(`ok the throughput card says "${(await tput()).hero}, ${(await tput()).unit}" before any request`);
await page.evaluate(() => {
  const row = [...document.querySelectorAll('.card .kv')].find((r) => /since start/.test(r.querySelector('.k')?.textContent));
  const el = row?.querySelector('[data-metric]');
  const w = (window.__disk = { metric: el?.getAttribute('data-metric') ?? null, values: [] });
  if (!el) return;
  const look = () => w.values.push({ value: el.getAttribute('data-value'), text: el.textContent });
  look();
  new MutationObserver(look).observe(el, { attributes: true, childList: true, characterData: true, subtree: true });
});

// (c) Chat. The settings are set as a user would, then the message typed.
async function setField(sel, value) {
  await page.evaluate((sel, value) => {
    const el = document.querySelector(sel);
    el.value = value;
    el.dispatchEvent(new Event('input', { bubbles: true }));
    el.dispatchEvent(new Event('change', { bubbles: true }));
  }, sel, String(value));
}
// Records every change of the newest answer's text and data-done, as the
// page makes it, into window.__web.samples.
async function watchAnswers() {
  await page.evaluate(() => {
    const w = (window.__web = { samples: [] });
    const look = () => {
      const all = document.querySelectorAll('.msg.assistant .answer');
      const a = all[all.length - 1];
      if (!a) return;
      const s = { n: all.length, text: a.textContent, done: a.getAttribute('data-done') };
      const last = w.samples[w.samples.length - 1];
      if (!last || last.n !== s.n || last.text !== s.text || last.done !== s.done) w.samples.push(s);
    };
    w.observer = new MutationObserver(look);
    w.observer.observe(document.body, { subtree: true, childList: true, characterData: true, attributes: true });
  });
}
const answers = () => page.evaluate(() => document.querySelectorAll('.msg.assistant .answer').length);
async function send(text) {
  const before = await answers();
  await page.click('#chat-input');
  await page.keyboard.type(text);
  await page.click('#chat-send');
  await until(async () => (await answers()) > before, 5000, `no new .msg.assistant .answer after sending "${text}"`);
  return before;
}
const lastAnswer = () => page.evaluate(() => {
  const all = document.querySelectorAll('.msg.assistant .answer');
  const a = all[all.length - 1];
  return { text: a.textContent, done: a.getAttribute('data-done') };
});

await setField('#chat-temperature', 0);
await setField('#chat-max-tokens', 40);
await watchAnswers();
const nBefore = await send('Hello there');
await until(async () => (await lastAnswer()).done !== null, 30000,
  async () => `the answer never got data-done (now: ${JSON.stringify(await lastAnswer())})`);
const first = await lastAnswer();
await check(first.done === '1', 'the answer ends with data-done="1"', `data-done="${first.done}"`);
const samples = (await page.evaluate(() => window.__web.samples)).filter((s) => s.n === nBefore + 1);
const growing = samples.filter((s) => s.done === null && s.text.length > 0);
const steps = new Set(growing.map((s) => s.text.length)).size;
await check(steps >= 2, 'the answer grows in at least two steps while it streams',
  `${steps} distinct non-empty texts before data-done: ${JSON.stringify(growing.map((s) => s.text.length))}`);
let prev = '';
for (const s of growing) {
  if (!s.text.startsWith(prev.trimEnd()) || !first.text.startsWith(s.text.trimEnd()))
    await fail(`the streamed answer was not a growing prefix of the final one: "${prev}" then "${s.text}", final "${first.text}"`);
  prev = s.text;
}
console.log(`ok the answer grew in ${steps} steps to ${first.text.length} characters`);

// The same request from Node, not streamed: the page shows the API's answer.
await check(chatBodies.length === 1, 'the page sent one chat request', `${chatBodies.length} requests`);
const sent = JSON.parse(chatBodies[0]);
await check(sent.stream === true && sent.max_tokens === 40 && sent.temperature === 0 &&
  Array.isArray(sent.messages) && sent.messages.at(-1).content === 'Hello there',
  'the chat request streams the typed message with the settings', chatBodies[0]);
const again = await fetch(`${base}/v1/chat/completions`, {
  method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ ...sent, stream: false, stream_options: undefined }),
});
const aj = await again.json();
const norm = (t) => (t ?? '').replace(/\s+/g, ' ').trim();
await check(norm(aj.choices?.[0]?.message?.content) === norm(first.text),
  'the answer shown is the text the API gives for the same request',
  `page "${first.text}", API "${aj.choices?.[0]?.message?.content}"`);
const tk = aj.timings;
await check(tk && ['queue_s', 'ttft_s', 'decode_s', 'tokens_per_second', 'prompt_tokens', 'cached_tokens',
  'completion_tokens'].every((k) => typeof tk[k] === 'number') && tk.completion_tokens === aj.usage?.completion_tokens,
  'a chat answer carries timings beside usage', JSON.stringify({ timings: tk, usage: aj.usage }));
const timings = await page.evaluate(() => {
  const all = document.querySelectorAll('.msg.assistant');
  const m = all[all.length - 1];
  const out = {};
  for (const k of ['tokens_per_second', 'ttft_s', 'queue_s']) {
    const el = m.querySelector(`.timings [data-timing="${k}"]`);
    out[k] = el ? el.textContent : null;
  }
  return out;
});
for (const [k, v] of Object.entries(timings)) {
  const n = v === null ? NaN : Number((v.match(/-?\d+(?:\.\d+)?(?:e-?\d+)?/i) ?? [])[0]);
  await check(Number.isFinite(n) && n >= 0 && (k !== 'tokens_per_second' || n > 0), `the timing ${k} shows a number`,
    v === null ? `no .timings [data-timing="${k}"] in the answer` : `it shows "${v}"`);
}
// (g) Idle after the two answers: the card keeps the last decode rate, the
// rate the answers themselves ran at, whatever the idle time since.
await until(idle, 10000, 'the server never went idle after the first answer');
const after = await until(async () => { const t = await tput(); return t.hero === 'idle' ? t : null; }, 3000,
  async () => `idle after an answer, the throughput card says "${(await tput()).hero}, ${(await tput()).unit}"`);
const lastRate = Number(after.value), own = tk.tokens_per_second;
await check(after.hero === 'idle' && /^last [0-9.,]+ tok\/s decode$/.test(after.unit ?? '') &&
  sameRate(after.unit.replace(/^last |tok\/s decode$/g, ''), lastRate),
  `idle after an answer, the throughput card says "${after.hero}, ${after.unit}"`, JSON.stringify(after));
await check(lastRate >= own / 2 && lastRate <= own * 2,
  `its last decode rate ${lastRate.toFixed(1)} tok/s is the answer's own ${own.toFixed(1)} tok/s within a factor of two`,
  'the headline is not the rate the answers ran at');
await page.screenshot({ path: path.join(artifacts, 'chat.png'), fullPage: true });

// Stop on a long answer, then the next message is answered.
await setField('#chat-max-tokens', 1500);
stopping = true;
const nStop = await send('Tell a long story');
await until(async () => (await lastAnswer()).text.length > 0, 30000, 'the long answer never showed text');
// (g) While it streams, the card shows the decode rate it carries.
const busyCard = await until(async () => {
  const t = await tput();
  return t.busy && t.hero !== 'idle' && sameRate(t.hero, Number(t.value)) && Number(t.value) > 0 ? t : null;
}, 10000, async () => `while an answer streams the throughput card says "${(await tput()).hero}, ${(await tput()).unit}"`);
await check(busyCard.unit === 'tok/s decode', `while an answer streams the card says "${busyCard.hero} ${busyCard.unit}"`,
  JSON.stringify(busyCard));
await page.click('#chat-stop');
await until(async () => (await lastAnswer()).done !== null, 10000,
  'after Stop the answer never got data-done');
const stopped = await lastAnswer();
await check(stopped.done === 'stopped', 'Stop ends the answer with data-done="stopped"', `data-done="${stopped.done}"`);
await until(idle, 10000, 'the server still ran the stopped answer 10 s after Stop (colibri_active_slots > 0)');
stopping = false;
await setField('#chat-max-tokens', 12);
await send('Say hello');
await until(async () => (await lastAnswer()).done !== null, 30000, 'the message after Stop never ended');
await check((await lastAnswer()).done === '1' && (await lastAnswer()).text.length > 0,
  'after Stop the server answers the next message', JSON.stringify(await lastAnswer()));
await check((await answers()) === nStop + 2, 'three answers in the chat', `${await answers()} answers`);
await noProblems('after the chats');

// (d) The runtime panel against /metrics, idle. The page's sample is read
// between two fetches of /metrics; where the two agree (all counters, when
// idle) the page must show exactly that number. A sample that moved between
// them must lie between the two, within 1% for the process's resident set,
// which moves on its own.
await until(idle, 10000, 'the server never went idle');
const shown = [
  'colibri_decode_tokens_per_second', 'colibri_generated_tokens_total', 'colibri_queue_length', 'colibri_active_slots',
  'colibri_slots', 'colibri_ram_budget_bytes', 'colibri_ram_resident_bytes', 'colibri_ram_kv_bytes',
  'colibri_ram_expert_cache_bytes', 'colibri_ram_pinned_bytes', 'colibri_ram_scratch_bytes',
  'colibri_resident_set_bytes', 'colibri_disk_gigabytes_per_second', 'colibri_disk_recent_gigabytes_per_second',
  'colibri_disk_profile_gigabytes_per_second', 'colibri_expert_read_bytes_total', 'colibri_step_seconds_total',
  'colibri_disk_wait_seconds_total', 'colibri_compute_seconds_total', 'colibri_expert_requests_total',
  'colibri_expert_pinned_hits_total', 'colibri_expert_cached_hits_total', 'colibri_expert_misses_total',
  'colibri_expert_hit_rate', 'colibri_prefetch_precision', 'colibri_prefetch_recall', 'colibri_prefetch_enabled',
  'colibri_copy_read_bytes_total{copy="0"}', 'colibri_copy_weight{copy="0"}',
];
const drift = { 'colibri_resident_set_bytes': 0.01 };
let panelChecked = 0;
for (let attempt = 1; ; attempt++) {
  const a = await metrics();
  const ev = await page.evaluate(() => window.colibri.events);
  await until(async () => (await page.evaluate(() => window.colibri.events)) > ev + 1, 5000,
    'no state event for 5 s while idle');
  const values = await page.evaluate(() =>
    [...document.querySelectorAll('[data-metric]')].map((el) => [el.getAttribute('data-metric'), el.getAttribute('data-value')]));
  const b = await metrics();
  const missing = shown.filter((n) => !values.some(([k]) => k === n));
  await check(missing.length === 0, 'the panel shows every metric the contract lists', `no [data-metric] for ${missing.join(', ')}`);
  const bad = [], moved = [], kinds = { exact: 0, 'at the printed precision': 0, 'between the two fetches': 0 };
  for (const [name, v] of values) {
    const x = a.get(name), y = b.get(name), got = Number(v);
    if (!x || !y) { bad.push(`${name}: not in /metrics`); continue; }
    if (v === null || v === '' || !Number.isFinite(got)) { bad.push(`${name}: data-value "${v}"`); continue; }
    const lo = Math.min(x.value, y.value), hi = Math.max(x.value, y.value), tol = (drift[name] ?? 0) * hi;
    // /metrics may print fewer digits than the page holds: equal at its precision.
    const digits = (t) => t.replace(/^-|e.*$/gi, '').replace('.', '').replace(/^0+/, '').length || 1;
    const same = (s) => got === s.value || Number(got.toPrecision(Math.min(21, digits(s.text)))) === s.value;
    if (got === x.value || got === y.value) kinds.exact++;
    else if (same(x) || same(y)) kinds['at the printed precision']++;
    else if (got >= lo - tol && got <= hi + tol) kinds['between the two fetches']++, moved.push(name);
    else bad.push(`${name}: the page shows ${v}, /metrics says ${x.text}` + (x.text !== y.text ? ` then ${y.text}` : ''));
  }
  if (bad.length && attempt < 3) continue; // a step between the fetches; idle again, so once more
  const how = Object.entries(kinds).filter(([, n]) => n).map(([k, n]) => `${n} ${k}`).join(', ') +
    (moved.length ? ` (${moved.join(', ')})` : '');
  await check(bad.length === 0, `every [data-metric] equals /metrics (${values.length} elements: ${how})`,
    '\n  ' + bad.join('\n  '));
  panelChecked = values.length;
  break;
}

// (e) The expert map, every cell as drawn, for the C test to compare with
// the --stats-json report; idle since before the panel's state events.
const map = await page.evaluate(async () => {
  const step = window.colibri.state.map.step;
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  const s = window.colibri.state.map;
  const cells = [];
  for (let r = 0; r < s.layers; r++) {
    const row = [];
    for (let e = 0; e < s.experts; e++) row.push(window.colibri.map.cell(r, e));
    cells.push(row);
  }
  return { layers: s.layers, experts: s.experts, layer_ids: s.layer_ids, step: s.step, step_before: step, cells };
});
await check(map.step === map.step_before, 'no forward step while the map was read', `step ${map.step_before} -> ${map.step}`);
await check(map.layers > 0 && map.experts > 0 && map.layer_ids.length === map.layers && map.cells.every((row) =>
  row.every((c) => c && typeof c.routed === 'number' && typeof c.layer === 'number' && typeof c.expert === 'number')),
  `the map has ${map.layers} x ${map.experts} cells, each with layer, expert and routed`,
  JSON.stringify(map).slice(0, 400));
for (let r = 0; r < map.layers; r++)
  for (let e = 0; e < map.experts; e++) {
    const c = map.cells[r][e];
    if (c.layer !== map.layer_ids[r] || c.expert !== e)
      await fail(`map.cell(${r}, ${e}) names layer ${c.layer} expert ${c.expert}, want layer ${map.layer_ids[r]} expert ${e}`);
  }
fs.writeFileSync(path.join(artifacts, 'map.json'), JSON.stringify({
  layers: map.layers, experts: map.experts, layer_ids: map.layer_ids,
  routed: map.cells.map((row) => row.map((c) => c.routed)),
}));
const used = map.cells.flat().filter((c) => c.routed > 0);
await check(used.length > 0, `${used.length} cells show routed experts`, 'no cell has routed > 0 after three chats');

// Hover the most routed cell. The viewport grows to the whole page first, so
// that the cell is on screen wherever the layout puts the map.
const full = await page.evaluate(() => Math.ceil(document.documentElement.scrollHeight));
if (full > HEIGHT) await page.setViewport({ width: WIDTH, height: full });
await page.evaluate(() => window.scrollTo(0, 0));
const hot = used.reduce((a, c) => (c.routed > a.routed ? c : a));
const hotRow = map.layer_ids.indexOf(hot.layer);
const rect = await page.evaluate((r, e) => window.colibri.map.rect(r, e), hotRow, hot.expert);
await check(rect && rect.w > 0 && rect.h > 0, `map.rect(${hotRow}, ${hot.expert}) is on the page`, JSON.stringify(rect));
const tipShown = () => page.evaluate(() => {
  const t = document.getElementById('map-tip');
  if (!t || t.hidden) return null;
  const cs = getComputedStyle(t), r = t.getBoundingClientRect();
  return cs.display !== 'none' && cs.visibility !== 'hidden' && r.width > 0 && r.height > 0 ? t.textContent : null;
});
await page.mouse.move(rect.x + rect.w / 2, rect.y + rect.h / 2);
const tip = await until(tipShown, 3000, `hovering cell (${hotRow}, ${hot.expert}) at ${JSON.stringify(rect)} shows no #map-tip`);
// "layer 2", "expert: 7", "routed 37": the word, then the number.
const names = (word, n) => new RegExp(`${word}\\D{0,3}${n}(?![0-9.])`, 'i').test(tip);
const hasNumber = (n) => new RegExp(`(^|[^0-9.])${n}([^0-9.]|$)`).test(tip);
await check(names('layer', hot.layer) && names('expert', hot.expert) && names('routed', hot.routed) &&
  hasNumber(hot.ram_hits) && hasNumber(hot.last),
  `#map-tip names layer ${hot.layer}, expert ${hot.expert}, routed ${hot.routed}, RAM hits ${hot.ram_hits}, last use ${hot.last}`,
  `it says "${tip}"`);
await page.screenshot({ path: path.join(artifacts, 'map-tip.png'), fullPage: true });
await page.mouse.move(2, 2);
await until(async () => (await tipShown()) === null, 3000, 'moving off the map leaves #map-tip shown');
console.log('ok moving off the map hides #map-tip');

// (f) The whole page after the chats, and the README's picture.
await page.setViewport({ width: WIDTH, height: HEIGHT });
await page.evaluate(() => window.scrollTo(0, 0));
await page.screenshot({ path: path.join(artifacts, 'dashboard.png'), fullPage: true });
const disk = await page.evaluate(() => window.__disk);
const falls = disk.values.map((v, i) => [Number(disk.values[i - 1]?.value), Number(v.value), i])
  .filter(([a, b]) => b < a).map(([a, b, i]) => `${disk.values[i - 1].text} (${a}) then ${disk.values[i].text} (${b})`);
await check(disk.metric && disk.values.length >= 2 && falls.length === 0,
  `the disk card's "since start" (${disk.metric}) never fell over ${disk.values.length} values`,
  disk.metric ? falls.join('; ') || `${disk.values.length} values` : 'no row labelled "since start"');
await noProblems('at the end');
await browser.close();
console.log(`all checks passed (${panelChecked} panel numbers, ${map.layers}x${map.experts} map, ${Date.now() - t0} ms)`);
