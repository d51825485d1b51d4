/* panel.js: the runtime panel. Built once, then updated from each state
 * event (colibri.onState): the decode rate with a sparkline (or "idle"),
 * the RAM budget and its split, disk bandwidth against the saved profile
 * and the bytes read since start, disk wait / compute, expert hit split,
 * prefetch precision / recall, per-copy traffic and the request queue.
 * Every number shown from a metric is an element with data-metric="NAME"
 * and data-value="RAW" (docs/DASHBOARD.md); derived shares (percentages of
 * a bar) carry data-derived instead. */
'use strict';

(function () {
	const C = window.colibri;
	const nums = [];          /* { el, name, fmt } */
	const bars = [];          /* { el, segs: [{ el, lab, value(m) }], total(m) } */
	const spark = { canvas: null, pts: [], dirty: false };
	const tput = { hero: null, unit: null, card: null };
	let copiesBox = null, copiesCard = null, copiesKey = '';

	/* ---- formatting ---- */
	function bytes(v) {
		const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
		let i = 0;
		while (Math.abs(v) >= 1024 && i < u.length - 1) {
			v /= 1024;
			i++;
		}
		return (i ? v.toFixed(v < 10 ? 2 : v < 100 ? 1 : 0) : String(Math.round(v))) + ' ' + u[i];
	}
	const fixed = (d) => (v) => v.toFixed(d);
	const int = (v) => Math.round(v).toLocaleString('en-US');
	const pct = (v) => (v * 100).toFixed(1) + '%';
	const secs = (v) => (v < 10 ? v.toFixed(2) : v < 100 ? v.toFixed(1) : Math.round(v).toString()) + ' s';
	const gbs = (v) => v.toFixed(2) + ' GB/s';
	const rate = (v) => (v >= 100 ? int(v) : v.toFixed(1));

	/* ---- building blocks ---- */
	const h = C.el;

	function num(name, fmt, cls) {
		const e = h('span', 'num' + (cls ? ' ' + cls : ''), '—');
		e.dataset.metric = name;
		nums.push({ el: e, name, fmt });
		return e;
	}

	/* A labelled row: "label ........ number [extra]". */
	function row(parent, label, name, fmt, swatch) {
		const r = h('div', 'kv');
		const l = h('span', 'k');
		if (swatch)
			l.appendChild(h('i', 'sw ' + swatch));
		l.appendChild(document.createTextNode(label));
		r.appendChild(l);
		const n = num(name, fmt);
		r.appendChild(n);
		parent.appendChild(r);
		return r;
	}

	function card(title, wide) {
		const c = h('div', 'card' + (wide ? ' wide' : ''));
		c.appendChild(h('h3', '', title));
		document.getElementById('panel-cards').appendChild(c);
		return c;
	}

	/* A stacked bar; segs: [cls, label, value(metrics)], total(metrics) the
	 * bar's full width (the segments' sum when null). */
	function bar(parent, segs, total) {
		const b = h('div', 'bar');
		const out = { el: b, segs: [], total };
		for (const [cls, label, value] of segs) {
			const s = h('span', 'seg ' + cls);
			s.title = label;
			b.appendChild(s);
			out.segs.push({ el: s, label, value });
		}
		parent.appendChild(b);
		bars.push(out);
		return out;
	}

	const m = (name) => (ms) => (typeof ms[name] === 'number' ? ms[name] : 0);

	/* ---- the cards ---- */
	function build() {
		/* The headline is the decode rate (tokens per second of the steps
		 * that generated), never a wall-clock average that idle time
		 * dilutes; with no request active or queued it says idle and keeps
		 * the last rate beside it. throughput() writes it, not the loop. */
		let c = card('Throughput');
		tput.card = c;
		const big = h('div', 'big');
		tput.hero = h('span', 'num hero', '—');
		tput.hero.dataset.metric = 'colibri_decode_tokens_per_second';
		tput.hero.title = 'tokens generated per second of the steps that generated, over the last 10 s of them';
		big.appendChild(tput.hero);
		tput.unit = h('span', 'unit', 'tok/s decode');
		big.appendChild(tput.unit);
		c.appendChild(big);
		spark.canvas = h('canvas', 'spark');
		c.appendChild(spark.canvas);
		row(c, 'generated tokens', 'colibri_generated_tokens_total', int);
		const q = h('div', 'kv');
		q.appendChild(h('span', 'k', 'queued / active / slots'));
		const qv = h('span', 'nums');
		qv.appendChild(num('colibri_queue_length', int));
		qv.appendChild(document.createTextNode(' / '));
		qv.appendChild(num('colibri_active_slots', int));
		qv.appendChild(document.createTextNode(' / '));
		qv.appendChild(num('colibri_slots', int));
		q.appendChild(qv);
		c.appendChild(q);
		row(c, 'uptime', 'colibri_uptime_seconds', secs);

		c = card('RAM');
		const cacheOnly = (ms) => Math.max(0, m('colibri_ram_expert_cache_bytes')(ms) - m('colibri_ram_pinned_bytes')(ms));
		const used = (ms) => m('colibri_ram_resident_bytes')(ms) + m('colibri_ram_kv_bytes')(ms) +
			m('colibri_ram_expert_cache_bytes')(ms) + m('colibri_ram_scratch_bytes')(ms);
		bar(c, [
			['c-res', 'resident (dense weights)', m('colibri_ram_resident_bytes')],
			['c-kv', 'KV (sequence state)', m('colibri_ram_kv_bytes')],
			['c-pin', 'pinned experts', m('colibri_ram_pinned_bytes')],
			['c-cache', 'expert cache (not pinned)', cacheOnly],
			['c-scr', 'scratch', m('colibri_ram_scratch_bytes')],
		], (ms) => Math.max(m('colibri_ram_budget_bytes')(ms), used(ms)));
		row(c, 'budget', 'colibri_ram_budget_bytes', bytes);
		row(c, 'resident', 'colibri_ram_resident_bytes', bytes, 'c-res');
		row(c, 'KV', 'colibri_ram_kv_bytes', bytes, 'c-kv');
		row(c, 'expert cache', 'colibri_ram_expert_cache_bytes', bytes, 'c-cache');
		row(c, '  of it pinned', 'colibri_ram_pinned_bytes', bytes, 'c-pin');
		row(c, 'scratch', 'colibri_ram_scratch_bytes', bytes, 'c-scr');
		row(c, 'process RSS', 'colibri_resident_set_bytes', bytes);

		c = card('Disk');
		const dbig = h('div', 'big');
		dbig.appendChild(num('colibri_disk_recent_gigabytes_per_second', fixed(2), 'hero'));
		dbig.appendChild(h('span', 'unit', 'GB/s now'));
		c.appendChild(dbig);
		/* against the saved profile; a disk never profiled (0) is shown
		 * against the fastest rate seen instead */
		let seen = 0;
		bar(c, [['c-disk', 'recent GB/s (of the profile)', m('colibri_disk_recent_gigabytes_per_second')]], (ms) => {
			const now = m('colibri_disk_recent_gigabytes_per_second')(ms);
			seen = Math.max(seen, now, m('colibri_disk_gigabytes_per_second')(ms));
			const prof = m('colibri_disk_profile_gigabytes_per_second')(ms);
			return Math.max(prof > 0 ? prof : seen, now, 1e-9);
		});
		/* "since start" is the bytes read, a counter that only grows; the
		 * mean rate (bytes / busy time) is labelled as the average it is:
		 * it falls whenever reads come slower than the start-up's. */
		row(c, 'read since start', 'colibri_expert_read_bytes_total', bytes);
		row(c, 'average while reading', 'colibri_disk_gigabytes_per_second', gbs);
		const prof = row(c, 'disk profile', 'colibri_disk_profile_gigabytes_per_second', (v) => (v > 0 ? gbs(v) : 'not profiled'));
		prof.classList.add('profile');

		c = card('Step time');
		bar(c, [
			['c-wait', 'disk wait', m('colibri_disk_wait_seconds_total')],
			['c-comp', 'compute', m('colibri_compute_seconds_total')],
		], null);
		row(c, 'disk wait', 'colibri_disk_wait_seconds_total', secs, 'c-wait');
		row(c, 'compute', 'colibri_compute_seconds_total', secs, 'c-comp');
		row(c, 'in steps', 'colibri_step_seconds_total', secs);

		c = card('Expert hits');
		const hbig = h('div', 'big');
		hbig.appendChild(num('colibri_expert_hit_rate', pct, 'hero'));
		hbig.appendChild(h('span', 'unit', 'from RAM'));
		c.appendChild(hbig);
		bar(c, [
			['c-pin', 'pinned hits', m('colibri_expert_pinned_hits_total')],
			['c-cache', 'cached hits', m('colibri_expert_cached_hits_total')],
			['c-miss', 'missed (read from disk)', m('colibri_expert_misses_total')],
		], null);
		row(c, 'pinned', 'colibri_expert_pinned_hits_total', int, 'c-pin');
		row(c, 'cached', 'colibri_expert_cached_hits_total', int, 'c-cache');
		row(c, 'missed', 'colibri_expert_misses_total', int, 'c-miss');
		row(c, 'requests', 'colibri_expert_requests_total', int);

		c = card('Prefetch');
		row(c, 'precision', 'colibri_prefetch_precision', pct);
		bar(c, [['c-pre', 'precision', m('colibri_prefetch_precision')]], () => 1);
		row(c, 'recall', 'colibri_prefetch_recall', pct);
		bar(c, [['c-rec', 'recall', m('colibri_prefetch_recall')]], () => 1);
		row(c, 'enabled', 'colibri_prefetch_enabled', (v) => (v ? 'yes' : 'no'));

		copiesCard = card('Copies', true);
		copiesCard.hidden = true;
		copiesBox = h('div', 'copies');
		copiesCard.appendChild(copiesBox);
	}

	/* Per-copy rows, rebuilt only when the set of copies changes. */
	function copies(state) {
		const ms = state.metrics || {};
		const ks = [];
		for (const name in ms) {
			const r = /^colibri_copy_read_bytes_total\{copy="([^"]*)"\}$/.exec(name);
			if (r)
				ks.push(r[1]);
		}
		const list = state.copies || [];
		const n = Math.max(ks.length, list.length);
		copiesCard.hidden = n < 2;
		ks.sort((a, b) => Number(a) - Number(b));
		const keyNow = ks.join(',');
		if (keyNow !== copiesKey) {
			copiesKey = keyNow;
			for (let i = nums.length - 1; i >= 0; i--)
				if (nums[i].el.closest('.copies'))
					nums.splice(i, 1);
			copiesBox.textContent = '';
			const head = h('div', 'copy head');
			for (const t of ['copy', 'read', 'weight', 'state'])
				head.appendChild(h('span', '', t));
			copiesBox.appendChild(head);
			for (const k of ks) {
				const r = h('div', 'copy');
				r.appendChild(h('span', 'k', k === '0' ? '0 (primary)' : k));
				r.appendChild(num('colibri_copy_read_bytes_total{copy="' + k + '"}', bytes));
				r.appendChild(num('colibri_copy_weight{copy="' + k + '"}', fixed(2)));
				const st = h('span', 'copy-state');
				st.dataset.copy = k;
				r.appendChild(st);
				copiesBox.appendChild(r);
			}
		}
		for (const st of copiesBox.querySelectorAll('.copy-state')) {
			const c = list[Number(st.dataset.copy)];
			st.textContent = !c ? '' : (c.in_rotation ? 'in rotation' : 'out') + (c.failures ? ', ' + c.failures + ' failures' : '');
		}
	}

	function update(state) {
		const ms = state.metrics || {};
		copies(state);
		for (const n of nums) {
			const v = ms[n.name];
			if (typeof v === 'number' && isFinite(v)) {
				const s = String(v);
				if (n.el.dataset.value !== s) {
					n.el.dataset.value = s;
					n.el.textContent = n.fmt(v);
				}
			} else if ('value' in n.el.dataset) {
				delete n.el.dataset.value;
				n.el.textContent = '—';
			}
		}
		for (const b of bars) {
			const vals = b.segs.map((s) => Math.max(0, s.value(ms)));
			const sum = vals.reduce((a, x) => a + x, 0);
			const total = b.total ? b.total(ms) : sum;
			b.segs.forEach((s, i) => {
				const f = total > 0 ? Math.min(1, vals[i] / total) : 0;
				s.el.style.width = (f * 100).toFixed(2) + '%';
				s.el.title = s.label + ': ' + (f * 100).toFixed(1) + '%';
				s.el.dataset.derived = f.toFixed(4);
			});
		}
		const tps = throughput(ms);
		if (typeof tps === 'number') {
			spark.pts.push({ t: performance.now(), v: tps });
			const cut = performance.now() - 120000;
			while (spark.pts.length && spark.pts[0].t < cut)
				spark.pts.shift();
			if (!spark.dirty) {
				spark.dirty = true;
				requestAnimationFrame(drawSpark);
			}
		}
	}

	/* The headline from the decode rate and whether anything runs; returns
	 * what the sparkline plots (0 while idle), undefined without a rate. */
	function throughput(ms) {
		const v = ms.colibri_decode_tokens_per_second;
		if (typeof v !== 'number' || !isFinite(v)) {
			delete tput.hero.dataset.value;
			tput.hero.textContent = '—';
			return undefined;
		}
		const idle = !(ms.colibri_active_slots > 0) && !(ms.colibri_queue_length > 0);
		tput.hero.dataset.value = String(v);
		tput.card.dataset.idle = idle ? '1' : '0';
		tput.hero.textContent = idle ? 'idle' : rate(v);
		tput.unit.textContent = !idle ? 'tok/s decode' : v > 0 ? 'last ' + rate(v) + ' tok/s decode' : 'no request yet';
		return idle ? 0 : v;
	}

	/* The decode-rate sparkline over the last two minutes, on its own canvas. */
	function drawSpark() {
		spark.dirty = false;
		const cv = spark.canvas;
		const w = cv.clientWidth, hgt = cv.clientHeight;
		if (!w || !hgt)
			return;
		const dpr = window.devicePixelRatio || 1;
		if (cv.width !== Math.round(w * dpr) || cv.height !== Math.round(hgt * dpr)) {
			cv.width = Math.round(w * dpr);
			cv.height = Math.round(hgt * dpr);
		}
		const g = cv.getContext('2d');
		g.setTransform(dpr, 0, 0, dpr, 0, 0);
		g.clearRect(0, 0, w, hgt);
		const pts = spark.pts;
		if (!pts.length)
			return;
		const now = performance.now(), span = 120000;
		let max = 0;
		for (const p of pts)
			max = Math.max(max, p.v);
		const top = max;
		max = max > 0 ? max * 1.15 : 1;
		const x = (t) => w - ((now - t) / span) * w;
		const y = (v) => hgt - 2 - (v / max) * (hgt - 4);
		const css = getComputedStyle(cv);
		g.beginPath();
		g.moveTo(x(pts[0].t), hgt);
		for (const p of pts)
			g.lineTo(x(p.t), y(p.v));
		g.lineTo(x(pts[pts.length - 1].t), hgt);
		g.closePath();
		g.fillStyle = css.getPropertyValue('--spark-fill').trim() || 'rgba(90,160,255,0.2)';
		g.fill();
		g.beginPath();
		pts.forEach((p, i) => (i ? g.lineTo(x(p.t), y(p.v)) : g.moveTo(x(p.t), y(p.v))));
		g.strokeStyle = css.getPropertyValue('--spark-line').trim() || '#5aa0ff';
		g.lineWidth = 1.5;
		g.stroke();
		g.fillStyle = css.getPropertyValue('--muted').trim() || '#888';
		g.font = '10px system-ui, sans-serif';
		g.textBaseline = 'top';
		g.fillText('max ' + top.toFixed(1) + ' tok/s, last 2 min', 3, 2);
	}

	C.ready(() => {
		build();
		C.onState(update);
		window.addEventListener('resize', () => {
			if (!spark.dirty) {
				spark.dirty = true;
				requestAnimationFrame(drawSpark);
			}
		});
	});
})();
