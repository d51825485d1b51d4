/* app.js: the page's core. Defines window.colibri (the test hooks of
 * docs/DASHBOARD.md), the API key (asked for after a 401, kept in
 * localStorage, sent as Authorization: Bearer on /v1/* and /api/*), the
 * /api/live stream (fetch + ReadableStream, parsed as server-sent events,
 * reconnected with backoff; never polled), the model name and the tabs.
 * panel.js, map.js and chat.js register with colibri.onState and run from
 * colibri.ready; they load after this file (defer keeps the order). */
'use strict';

(function () {
	const KEY_STORE = 'colibri.api_key';
	const listeners = [];
	const readies = [];
	let keyAsk = null;

	const colibri = {
		state: null,
		events: 0,
		model: '',
		map: { cell: () => null, rect: () => null },
		onState(fn) { listeners.push(fn); },
		ready(fn) { readies.push(fn); },
		api,
		readEvents,
		el,
	};
	window.colibri = colibri;

	function key() {
		try { return localStorage.getItem(KEY_STORE) || ''; } catch (e) { return ''; }
	}

	/* The one place that asks for the key; concurrent 401s share the dialog. */
	function askKey() {
		if (keyAsk)
			return keyAsk;
		keyAsk = new Promise((resolve) => {
			const dlg = document.getElementById('key-dialog');
			const form = document.getElementById('key-form');
			const input = document.getElementById('key-input');
			dlg.hidden = false;
			input.value = '';
			input.focus();
			form.onsubmit = (ev) => {
				ev.preventDefault();
				const k = input.value.trim();
				if (!k)
					return;
				try { localStorage.setItem(KEY_STORE, k); } catch (e) { /* private mode: key lives for this page */ }
				colibri.sessionKey = k;
				dlg.hidden = true;
				keyAsk = null;
				resolve(k);
			};
		});
		return keyAsk;
	}

	/* fetch() for /v1/* and /api/*: adds the key, and after a 401 asks for
	 * one and tries again. Resolves to the Response (any other status is the
	 * caller's); rejects only as fetch does (network, abort). */
	async function api(path, opts) {
		for (;;) {
			const o = Object.assign({}, opts || {});
			const h = new Headers(o.headers || {});
			const k = key() || colibri.sessionKey || '';
			if (k)
				h.set('Authorization', 'Bearer ' + k);
			o.headers = h;
			const res = await fetch(path, o);
			if (res.status !== 401)
				return res;
			try { await res.body.cancel(); } catch (e) { /* already closed */ }
			try { localStorage.removeItem(KEY_STORE); } catch (e) { /* ignore */ }
			colibri.sessionKey = '';
			await askKey();
		}
	}

	/* A server-sent events parser: feed() it decoded text as it arrives; it
	 * calls onEvent(name, data) per complete event ("message" when the event
	 * has no event: line). Comments and ids are ignored. */
	/* A new element: tag, class names, text. */
	function el(tag, cls, text) {
		const e = document.createElement(tag);
		if (cls)
			e.className = cls;
		if (text !== undefined)
			e.textContent = text;
		return e;
	}

	/* Reads a Response body of server-sent events to its end: onEvent(name,
	 * data) per event, onChunk() after each chunk that arrived (may be
	 * undefined). Rejects as the body's reader does (abort, network). */
	async function readEvents(res, onEvent, onChunk) {
		const parser = sseParser(onEvent);
		const reader = res.body.getReader();
		const dec = new TextDecoder();
		for (;;) {
			const r = await reader.read();
			if (r.done)
				break;
			if (onChunk)
				onChunk();
			parser.feed(dec.decode(r.value, { stream: true }));
		}
		parser.end();
	}

	function sseParser(onEvent) {
		let buf = '', name = '', data = [];
		return {
			feed(text) {
				buf += text;
				let i;
				while ((i = buf.search(/\r\n|\r|\n/)) >= 0) {
					const line = buf.slice(0, i);
					buf = buf.slice(i + (buf[i] === '\r' && buf[i + 1] === '\n' ? 2 : 1));
					if (line === '') {
						if (data.length)
							onEvent(name || 'message', data.join('\n'));
						name = '';
						data = [];
					} else if (line[0] !== ':') {
						const c = line.indexOf(':');
						const field = c < 0 ? line : line.slice(0, c);
						let v = c < 0 ? '' : line.slice(c + 1);
						if (v[0] === ' ')
							v = v.slice(1);
						if (field === 'event')
							name = v;
						else if (field === 'data')
							data.push(v);
					}
				}
			},
			end() {
				if (data.length)
					onEvent(name || 'message', data.join('\n'));
				data = [];
			},
		};
	}

	function publish(state) {
		colibri.state = state;
		colibri.events++;
		for (const fn of listeners) {
			try { fn(state); } catch (e) { /* one broken view must not stop the others */ setTimeout(() => { throw e; }); }
		}
	}

	/* /api/live: reconnects after 0.5 s, doubling to 10 s while it fails;
	 * a stream that stays silent for 20 s (the server sends one event a
	 * second when idle, one per step when busy) is dropped and reconnected. */
	function live() {
		const status = document.getElementById('live-status');
		let backoff = 500;
		const set = (cls, text) => { status.className = 'live ' + cls; status.textContent = text; };

		async function once() {
			const ctl = new AbortController();
			let timer = 0;
			const arm = () => { clearTimeout(timer); timer = setTimeout(() => ctl.abort(), 20000); };
			try {
				const res = await api('/api/live', { signal: ctl.signal, headers: { Accept: 'text/event-stream' }, cache: 'no-store' });
				if (!res.ok || !res.body) {
					try { await res.body.cancel(); } catch (e) { /* ignore */ }
					throw new Error('HTTP ' + res.status);
				}
				set('on', 'live');
				arm();
				await readEvents(res, (name, data) => {
					if (name !== 'state')
						return;
					let s;
					try { s = JSON.parse(data); } catch (e) { return; }
					backoff = 500;
					publish(s);
				}, arm);
			} catch (e) {
				/* dropped, refused or timed out: reconnect below */
			} finally {
				clearTimeout(timer);
			}
		}

		(async () => {
			for (;;) {
				await once();
				set('off', 'reconnecting');
				await new Promise((r) => setTimeout(r, backoff));
				backoff = Math.min(backoff * 2, 10000);
			}
		})();
	}

	async function model() {
		const el = document.getElementById('model-name');
		try {
			const res = await api('/v1/models', { cache: 'no-store' });
			const j = await res.json();
			const id = j && j.data && j.data[0] && j.data[0].id;
			if (id) {
				colibri.model = id;
				el.textContent = id;
				return;
			}
		} catch (e) { /* shown from the state below */ }
		colibri.onState((s) => {
			if (!colibri.model && s.model) {
				colibri.model = s.model;
				el.textContent = s.model;
			}
		});
	}

	/* Tabs only matter on narrow screens (style.css); on wide ones every
	 * pane is shown and the buttons are hidden. */
	function tabs() {
		const btns = document.querySelectorAll('.tabs button');
		for (const b of btns) {
			b.addEventListener('click', () => {
				document.body.dataset.tab = b.dataset.tab;
				for (const o of btns)
					o.classList.toggle('on', o === b);
				for (const p of document.querySelectorAll('[data-pane]'))
					p.classList.toggle('on', p.dataset.pane === b.dataset.tab);
				window.dispatchEvent(new Event('resize'));
			});
		}
	}

	document.addEventListener('DOMContentLoaded', () => {
		tabs();
		for (const fn of readies)
			fn();
		model();
		live();
	});
})();
