/* chat.js: the chat. Conversations live in localStorage (a list, new /
 * delete, the current one restored on reload); each has its own system
 * prompt, while temperature / top-p / max tokens are shared. An answer is
 * streamed from POST /v1/chat/completions (stream, include_usage) read with
 * fetch + ReadableStream; thinking (delta.reasoning_content) goes into a
 * folded <details>, the answer text beside it, and the last chunk's
 * `timings` under it. Stop aborts the fetch. Server errors (a JSON error
 * body or an SSE error event) are shown in the answer, never thrown.
 * DOM hooks: docs/DASHBOARD.md "Test hooks". */
'use strict';

(function () {
	const C = window.colibri;
	const STORE = 'colibri.chats', SETTINGS = 'colibri.chat_settings';
	let db = { current: '', list: [] };
	let live = null;                     /* { conv, msg, ctl, el } while streaming */
	let $ = {};

	/* ---- storage ---- */
	function load() {
		try {
			const j = JSON.parse(localStorage.getItem(STORE) || 'null');
			if (j && Array.isArray(j.list))
				db = j;
		} catch (e) { /* a broken store starts afresh */ }
		for (const c of db.list)
			for (const m of c.messages)
				if (m.pending) {         /* the page went away mid-answer */
					delete m.pending;
					m.stopped = true;
				}
	}

	function save() {
		try {
			localStorage.setItem(STORE, JSON.stringify(db));
		} catch (e) { /* full or private: the chat goes on unsaved */ }
	}

	function settingsLoad() {
		let s = {};
		try { s = JSON.parse(localStorage.getItem(SETTINGS) || '{}') || {}; } catch (e) { /* defaults */ }
		$.temp.value = s.temperature !== undefined ? s.temperature : '';
		$.topp.value = s.top_p !== undefined ? s.top_p : '';
		$.maxt.value = s.max_tokens !== undefined ? s.max_tokens : '';
	}

	function settingsSave() {
		const s = {};
		if ($.temp.value !== '') s.temperature = $.temp.value;
		if ($.topp.value !== '') s.top_p = $.topp.value;
		if ($.maxt.value !== '') s.max_tokens = $.maxt.value;
		try { localStorage.setItem(SETTINGS, JSON.stringify(s)); } catch (e) { /* ignore */ }
	}

	const conv = () => db.list.find((c) => c.id === db.current);

	function newConv() {
		const c = { id: Date.now().toString(36) + Math.random().toString(36).slice(2, 6), title: 'New chat', system: '', messages: [], updated: Date.now() };
		db.list.unshift(c);
		db.current = c.id;
		save();
		return c;
	}

	/* ---- rendering ---- */
	const h = C.el;

	function renderList() {
		$.list.textContent = '';
		for (const c of db.list) {
			const li = h('li', c.id === db.current ? 'on' : '');
			const t = h('span', 'title', c.title);
			t.title = c.title;
			li.appendChild(t);
			const del = h('button', 'del', '×');
			del.type = 'button';
			del.title = 'delete this chat';
			del.addEventListener('click', (ev) => {
				ev.stopPropagation();
				removeConv(c.id);
			});
			li.appendChild(del);
			li.addEventListener('click', () => select(c.id));
			$.list.appendChild(li);
		}
	}

	function msgEl(m) {
		const el = h('div', 'msg ' + m.role);
		el.appendChild(h('div', 'who', m.role === 'user' ? 'you' : 'assistant'));
		if (m.role === 'user') {
			el.appendChild(h('div', 'text', m.content));
			return el;
		}
		if (m.reasoning)
			thinkEl(el).querySelector('.think-text').textContent = m.reasoning;
		const ans = h('div', 'answer');
		ans.appendChild(document.createTextNode(m.content || ''));
		el.appendChild(ans);
		el.appendChild(h('div', 'timings'));
		paintEnd(el, m);
		return el;
	}

	/* The folded thinking of an answer, made when the first reasoning
	 * arrives (an answer without thinking has no .thinking). */
	function thinkEl(el) {
		let th = el.querySelector('.thinking');
		if (!th) {
			th = h('details', 'thinking');
			th.appendChild(h('summary', '', 'thinking'));
			th.appendChild(h('div', 'think-text'));
			el.insertBefore(th, el.querySelector('.answer'));
		}
		return th;
	}

	/* What an ended answer shows besides its text: the error, the timings,
	 * the thinking summary and data-done. */
	function paintEnd(el, m) {
		const ans = el.querySelector('.answer');
		const think = el.querySelector('.thinking');
		if (think)
			think.querySelector('summary').textContent = m.pending ? 'thinking…' : 'thought (' + m.reasoning.length + ' chars)';
		if (m.pending)
			return;
		const old = ans.querySelector('.err');
		if (old)
			old.remove();
		if (m.error)
			ans.appendChild(h('div', 'err', 'error: ' + m.error));
		else if (!m.content && !m.stopped)
			ans.appendChild(h('div', 'err empty', m.finish === 'length' ? '(max tokens reached before the answer)' : '(empty answer)'));
		const tm = el.querySelector('.timings');
		tm.textContent = '';
		const t = m.timings;
		if (t) {
			const part = (key, text, v) => {
				const s = h('span', '', text);
				s.dataset.timing = key;
				s.dataset.value = String(v);
				tm.appendChild(s);
			};
			if (typeof t.tokens_per_second === 'number')
				part('tokens_per_second', t.tokens_per_second.toFixed(1) + ' tok/s', t.tokens_per_second);
			if (typeof t.ttft_s === 'number')
				part('ttft_s', 'first token ' + secs(t.ttft_s), t.ttft_s);
			if (typeof t.queue_s === 'number')
				part('queue_s', 'queued ' + secs(t.queue_s), t.queue_s);
			if (typeof t.completion_tokens === 'number')
				part('completion_tokens', t.completion_tokens + ' tokens', t.completion_tokens);
			if (typeof t.prompt_tokens === 'number')
				part('prompt_tokens', 'prompt ' + t.prompt_tokens + (t.cached_tokens ? ' (' + t.cached_tokens + ' cached)' : ''), t.prompt_tokens);
			if (t.client)
				tm.title = 'measured in the browser: the server sent no timings';
		}
		if (m.stopped)
			tm.appendChild(h('span', 'stopped', 'stopped'));
		const done = m.stopped ? 'stopped' : m.error ? 'error' : '1';
		el.dataset.done = done;
		ans.dataset.done = done;
	}

	function secs(v) {
		return v < 1 ? (v * 1000).toFixed(0) + ' ms' : v.toFixed(2) + ' s';
	}

	function renderLog() {
		const c = conv();
		$.log.textContent = '';
		$.system.value = c ? c.system || '' : '';
		if (!c || !c.messages.length) {
			$.log.appendChild(h('div', 'empty-log', 'Ask something. The runtime panel and the expert map on the right follow each step.'));
			return;
		}
		for (const m of c.messages) {
			const el = msgEl(m);
			$.log.appendChild(el);
			if (live && live.msg === m)
				live.el = el;
		}
		$.log.scrollTop = $.log.scrollHeight;
	}

	function select(id) {
		db.current = id;
		save();
		renderList();
		renderLog();
	}

	function removeConv(id) {
		if (live && live.conv.id === id)
			live.ctl.abort();
		db.list = db.list.filter((c) => c.id !== id);
		if (db.current === id)
			db.current = db.list.length ? db.list[0].id : '';
		if (!db.list.length)
			newConv();
		save();
		renderList();
		renderLog();
	}

	function busy(on) {
		$.send.disabled = on;
		$.stop.disabled = !on;
	}

	/* ---- one answer ---- */
	function requestBody(c) {
		const msgs = [];
		if (c.system && c.system.trim())
			msgs.push({ role: 'system', content: c.system });
		for (const m of c.messages) {
			if (m.pending)
				continue;
			if (m.role === 'assistant' && !m.content)
				continue;
			msgs.push({ role: m.role, content: m.content });
		}
		const b = { messages: msgs, stream: true, stream_options: { include_usage: true } };
		if (C.model)
			b.model = C.model;
		const num = (el) => (el.value === '' || !isFinite(Number(el.value)) ? undefined : Number(el.value));
		if (num($.temp) !== undefined) b.temperature = num($.temp);
		if (num($.topp) !== undefined) b.top_p = num($.topp);
		if (num($.maxt) !== undefined) b.max_tokens = Math.max(1, Math.round(num($.maxt)));
		return b;
	}

	async function send() {
		const text = $.input.value.trim();
		if (!text || live)
			return;
		let c = conv() || newConv();
		c.system = $.system.value;
		if (!c.messages.length)
			c.title = text.replace(/\s+/g, ' ').slice(0, 48);
		c.messages.push({ role: 'user', content: text });
		const m = { role: 'assistant', content: '', reasoning: '', pending: true };
		const body = requestBody(c);
		c.messages.push(m);
		c.updated = Date.now();
		db.list = [c].concat(db.list.filter((x) => x !== c));
		$.input.value = '';
		save();
		renderList();
		renderLog();
		live = { conv: c, msg: m, ctl: new AbortController(), el: $.log.lastElementChild };
		busy(true);
		const t0 = performance.now();
		let tFirst = 0, pieces = 0;
		const append = (key, s) => {
			if (!s)
				return;
			if (!tFirst)
				tFirst = performance.now();
			pieces++;
			m[key] += s;
			const el = live.el;
			if (!el || !el.isConnected)
				return;
			if (key === 'content') {
				el.querySelector('.answer').firstChild.appendData(s);
			} else {
				const th = thinkEl(el);
				th.querySelector('.think-text').textContent = m.reasoning;
				th.querySelector('summary').textContent = 'thinking…';
			}
			stick();
		};
		try {
			const res = await C.api('/v1/chat/completions', {
				method: 'POST',
				headers: { 'Content-Type': 'application/json', Accept: 'text/event-stream' },
				body: JSON.stringify(body),
				signal: live.ctl.signal,
			});
			if (!res.ok) {
				m.error = await errorOf(res);
			} else {
				await readStream(res, m, append);
			}
		} catch (e) {
			if (e && e.name === 'AbortError')
				m.stopped = true;
			else
				m.error = 'connection failed: ' + (e && e.message ? e.message : String(e));
		}
		if (!m.timings && !m.error && tFirst) {
			const n = m.usage && m.usage.completion_tokens ? m.usage.completion_tokens : pieces;
			const dec = (performance.now() - tFirst) / 1000;
			m.timings = { client: true, ttft_s: (tFirst - t0) / 1000, tokens_per_second: n > 1 && dec > 0 ? (n - 1) / dec : 0, completion_tokens: n };
		}
		delete m.pending;
		c.updated = Date.now();
		save();
		const el = live.el;
		live = null;
		busy(false);
		if (el && el.isConnected) {
			paintEnd(el, m);
			stick();
		}
	}

	async function errorOf(res) {
		let text = '';
		try { text = await res.text(); } catch (e) { /* body lost */ }
		try {
			const j = JSON.parse(text);
			if (j && j.error)
				return (j.error.message || String(j.error)) + ' (HTTP ' + res.status + ')';
		} catch (e) { /* not JSON */ }
		return 'HTTP ' + res.status + (text ? ': ' + text.slice(0, 300) : '');
	}

	async function readStream(res, m, append) {
		let ended = false;
		await C.readEvents(res, (name, data) => {
			if (ended)
				return;
			if (data === '[DONE]') {
				ended = true;
				return;
			}
			let o;
			try { o = JSON.parse(data); } catch (e) { return; }
			if (o.error) {
				m.error = o.error.message || JSON.stringify(o.error);
				return;
			}
			const ch = o.choices && o.choices[0];
			if (ch) {
				const d = ch.delta || {};
				append('reasoning', d.reasoning_content);
				append('content', d.content);
				if (ch.finish_reason)
					m.finish = ch.finish_reason;
			}
			if (o.usage)
				m.usage = o.usage;
			if (o.timings)
				m.timings = o.timings;
		});
	}

	/* Follow the end of the log unless the reader scrolled up. */
	function stick() {
		const l = $.log;
		if (l.scrollHeight - l.scrollTop - l.clientHeight < 120)
			l.scrollTop = l.scrollHeight;
	}

	C.ready(() => {
		$ = {
			log: document.getElementById('chat-log'),
			list: document.getElementById('conv-list'),
			input: document.getElementById('chat-input'),
			send: document.getElementById('chat-send'),
			stop: document.getElementById('chat-stop'),
			system: document.getElementById('chat-system'),
			temp: document.getElementById('chat-temperature'),
			topp: document.getElementById('chat-top-p'),
			maxt: document.getElementById('chat-max-tokens'),
		};
		load();
		if (!conv())
			db.current = db.list.length ? db.list[0].id : newConv().id;
		settingsLoad();
		renderList();
		renderLog();
		busy(false);
		document.getElementById('chat-form').addEventListener('submit', (ev) => {
			ev.preventDefault();
			send();
		});
		$.input.addEventListener('keydown', (ev) => {
			if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
				ev.preventDefault();
				send();
			}
		});
		$.stop.addEventListener('click', () => {
			if (live)
				live.ctl.abort();
		});
		document.getElementById('conv-new').addEventListener('click', () => {
			const c = conv();
			if (c && !c.messages.length)
				return select(c.id);
			newConv();
			renderList();
			renderLog();
			$.input.focus();
		});
		$.system.addEventListener('input', () => {
			const c = conv();
			if (c) {
				c.system = $.system.value;
				save();
			}
		});
		for (const el of [$.temp, $.topp, $.maxt])
			el.addEventListener('change', settingsSave);
	});
})();
