// dashboard_shot — the screenshot half of tools/dashboard_shot.sh:
//   node tools/dashboard_shot.mjs BASE_URL OUT.png CHROMIUM
// Opens the dashboard at 1400x900 in headless Chromium (puppeteer-core from
// tools/node_modules) and asks two questions in its chat; then two API
// clients decode in bursts (3 s of work, 2 s idle, four times: the
// sparkline's shape) and go on until the page is saved to OUT.png, once the
// throughput card shows the decode rate (not "idle"). It checks the card
// again after the shot and takes it again if the server went idle in
// between. Prints the headline it caught. Uses only the page's test hooks
// (docs/DASHBOARD.md).
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, 'package.json'));
const puppeteer = require('puppeteer-core');

const [base, out, chromium] = process.argv.slice(2);
if (!base || !out || !chromium) {
  console.error('usage: node tools/dashboard_shot.mjs BASE_URL OUT.png CHROMIUM');
  process.exit(2);
}
const WIDTH = 1400, HEIGHT = 900;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function until(fn, ms, what) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(what);
    await sleep(25);
  }
}

const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  args: ['--no-sandbox', '--headless=new', '--disable-gpu', '--disable-dev-shm-usage', `--window-size=${WIDTH},${HEIGHT}`],
});
let running = false;
try {
  const page = await browser.newPage();
  await page.setViewport({ width: WIDTH, height: HEIGHT });
  await page.goto(`${base}/`, { waitUntil: 'load' });
  await until(() => page.evaluate(() => window.colibri?.state != null), 10000, 'no state event in 10 s');

  // Two questions, as a user would type them; short answers keep the chat
  // readable beside the panel.
  await page.evaluate(() => {
    const el = document.querySelector('#chat-max-tokens');
    el.value = '48';
    el.dispatchEvent(new Event('change', { bubbles: true }));
  });
  const answers = () => page.evaluate(() => document.querySelectorAll('.msg.assistant .answer[data-done]').length);
  for (const text of ['And God said', 'Tell me of the kings of Israel']) {
    const before = await answers();
    await page.click('#chat-input');
    await page.keyboard.type(text);
    await page.click('#chat-send');
    await until(async () => (await answers()) > before, 30000, `no answer to "${text}"`);
  }

  // Two clients decoding in a loop while `running`.
  const prompts = ['In the beginning', 'And Moses spake unto the people', 'Blessed are they', 'And it came to pass'];
  const client = async (k) => {
    for (let i = k; running; i += 2) {
      const r = await fetch(`${base}/v1/chat/completions`, {
        method: 'POST', headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ messages: [{ role: 'user', content: prompts[i % prompts.length] }], max_tokens: 400 }),
      });
      await r.text();
    }
  };
  let clients = [];
  const start = () => { running = true; clients = [client(0), client(1)]; };
  const stop = async () => { running = false; await Promise.all(clients); };
  for (let burst = 0; burst < 4; burst++) {
    start();
    await sleep(3000);
    await stop();
    await sleep(2000);
  }
  start();

  const card = () => page.evaluate(() => {
    const c = [...document.querySelectorAll('.card')].find((x) => x.querySelector('h3')?.textContent === 'Throughput');
    return { idle: c?.dataset.idle, hero: c?.querySelector('.hero')?.textContent, unit: c?.querySelector('.unit')?.textContent };
  });
  const busy = async () => { const c = await card(); return c.idle === '0' && c.hero !== 'idle' ? c : null; };

  let shot = null;
  for (let attempt = 0; attempt < 10 && !shot; attempt++) {
    await until(busy, 10000, 'the throughput card never showed the decode rate');
    await sleep(300);
    const before = await busy();
    await page.screenshot({ path: out });
    const after = await busy();
    if (before && after)
      shot = before;
  }
  if (!shot)
    throw new Error('the server went idle around every screenshot');
  await stop();
  console.log(`dashboard_shot: ${out}: the headline says "${shot.hero} ${shot.unit}"`);
} finally {
  running = false;
  await browser.close();
}
