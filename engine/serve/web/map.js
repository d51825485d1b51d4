/* map.js: the expert map. One <canvas> holds the layers x experts grid
 * (colour: where the expert lives, brightness: routing heat), the per-layer
 * hit-rate strip to its left, layer labels and expert ticks. The grid is
 * painted one pixel per cell into an offscreen canvas and scaled up without
 * smoothing, so 78 x 256 cells cost one putImageData and one drawImage. It
 * redraws at most once per animation frame, and only after a new state, a
 * hover change or a resize. Exposes colibri.map.cell / rect and the hover
 * card #map-tip (docs/DASHBOARD.md). */
'use strict';

(function () {
	const C = window.colibri;
	const WHERE = [
		{ name: 'on disk', rgb: [96, 112, 140] },
		{ name: 'loading', rgb: [255, 184, 48] },
		{ name: 'cached', rgb: [64, 200, 110] },
		{ name: 'pinned', rgb: [170, 120, 255] },
	];
	const NONE_RGB = [15, 18, 22];       /* a column past the layer's experts */
	const LABEL_W = 30, STRIP_W = 22, GAP = 4, TOP = 14;

	let canvas, g, tip, scroll, grid, gridCtx, img;
	let data = null;                     /* the last decoded map */
	let lay = null;                      /* layout in CSS pixels */
	let hover = null;                    /* { row, e } */
	let mouse = { x: 0, y: 0 };
	let queued = false;
	const palette = buildPalette();

	/* palette[where * 256 + heat]: RGBA packed as 4 bytes. Heat 0 is shown
	 * at 30% brightness so that cold experts still show where they live. */
	function buildPalette() {
		const p = new Uint8ClampedArray(5 * 256 * 4);
		for (let w = 0; w < 5; w++) {
			for (let h = 0; h < 256; h++) {
				const rgb = w < 4 ? WHERE[w].rgb : NONE_RGB;
				const f = w < 4 ? 0.3 + 0.7 * (h / 255) : 1;
				const o = (w * 256 + h) * 4;
				p[o] = rgb[0] * f;
				p[o + 1] = rgb[1] * f;
				p[o + 2] = rgb[2] * f;
				p[o + 3] = 255;
			}
		}
		return p;
	}

	function bytesOf(b64) {
		if (typeof b64 !== 'string')
			return new Uint8Array(0);
		const s = atob(b64);
		const out = new Uint8Array(s.length);
		for (let i = 0; i < s.length; i++)
			out[i] = s.charCodeAt(i);
		return out;
	}

	function u32Of(b64) {
		const b = bytesOf(b64);
		const n = b.length >> 2;
		const out = new Uint32Array(n);
		const dv = new DataView(b.buffer, b.byteOffset, n * 4);
		for (let i = 0; i < n; i++)
			out[i] = dv.getUint32(i * 4, true);
		return out;
	}

	function decode(m) {
		const n = m.layers * m.experts;
		/* a short array (a malformed state) is padded with zeros */
		const fit = (a, T) => {
			if (a.length >= n)
				return a;
			const z = new T(n);
			z.set(a);
			return z;
		};
		const fit8 = (a) => fit(a, Uint8Array), fit32 = (a) => fit(a, Uint32Array);
		return {
			layers: m.layers | 0,
			experts: m.experts | 0,
			step: m.step || 0,
			ids: Array.isArray(m.layer_ids) ? m.layer_ids : [],
			rate: Array.isArray(m.layer_hit_rate) ? m.layer_hit_rate : [],
			where: fit8(bytesOf(m.where)),
			heat: fit8(bytesOf(m.heat)),
			routed: fit32(u32Of(m.routed)),
			hits: fit32(u32Of(m.ram_hits)),
			last: fit32(u32Of(m.last)),
		};
	}

	function cell(row, e) {
		if (!data || row < 0 || e < 0 || row >= data.layers || e >= data.experts)
			return null;
		const i = row * data.experts + e;
		return {
			layer: data.ids[row] !== undefined ? data.ids[row] : row,
			expert: e,
			where: data.where[i],
			heat: data.heat[i],
			routed: data.routed[i],
			ram_hits: data.hits[i],
			last: data.last[i],
		};
	}

	/* The layout follows the pane's width: cells as wide as fit, at least
	 * 3 px (the canvas then scrolls sideways), rows no taller than keeps
	 * the grid within about half the window. */
	function layout() {
		if (!data)
			return false;
		const avail = Math.max(100, scroll.clientWidth - LABEL_W - STRIP_W - GAP - 2);
		const cw = Math.max(3, Math.min(16, Math.floor(avail / Math.max(1, data.experts))));
		const maxH = Math.max(120, window.innerHeight * 0.5);
		const ch = Math.max(3, Math.min(cw, 14, Math.floor(maxH / Math.max(1, data.layers))));
		const gx = LABEL_W + STRIP_W + GAP;
		const next = { cw, ch, gx, gy: TOP, w: gx + data.experts * cw, h: TOP + data.layers * ch, dpr: window.devicePixelRatio || 1 };
		const same = lay && ['cw', 'ch', 'w', 'h', 'dpr'].every((k) => lay[k] === next[k]);
		lay = next;
		if (!same) {
			canvas.style.width = lay.w + 'px';
			canvas.style.height = lay.h + 'px';
			canvas.width = Math.round(lay.w * lay.dpr);
			canvas.height = Math.round(lay.h * lay.dpr);
		}
		if (!grid || grid.width !== data.experts || grid.height !== data.layers) {
			grid = document.createElement('canvas');
			grid.width = Math.max(1, data.experts);
			grid.height = Math.max(1, data.layers);
			gridCtx = grid.getContext('2d');
			img = gridCtx.createImageData(grid.width, grid.height);
		}
		return true;
	}

	function schedule() {
		if (!queued) {
			queued = true;
			requestAnimationFrame(draw);
		}
	}

	/* Theme colours, read once (getComputedStyle in every frame costs more
	 * than the whole grid). */
	const theme = {};
	function css(name, dflt) {
		if (!(name in theme))
			theme[name] = getComputedStyle(document.documentElement).getPropertyValue(name).trim() || dflt;
		return theme[name];
	}

	function draw() {
		queued = false;
		/* a hidden pane (another tab on a narrow screen) is drawn when its
		 * tab shows it: the tabs send a resize */
		if (!data || !canvas.offsetParent || !layout())
			return;
		const { cw, ch, gx, gy, dpr } = lay;
		const L = data.layers, E = data.experts;
		const px = img.data;
		for (let i = 0, n = L * E; i < n; i++) {
			const w = data.where[i];
			const o = ((w < 4 ? w : 4) * 256 + (w < 4 ? data.heat[i] : 0)) * 4;
			const d = i * 4;
			px[d] = palette[o];
			px[d + 1] = palette[o + 1];
			px[d + 2] = palette[o + 2];
			px[d + 3] = 255;
		}
		gridCtx.putImageData(img, 0, 0);

		g.setTransform(dpr, 0, 0, dpr, 0, 0);
		g.clearRect(0, 0, lay.w, lay.h);
		g.imageSmoothingEnabled = false;
		g.drawImage(grid, gx, gy, E * cw, L * ch);

		const bg = css('--bg', '#0f1216');
		if (cw >= 6 || ch >= 6) {
			g.beginPath();
			if (cw >= 6)
				for (let e = 1; e < E; e++)
					g.rect(gx + e * cw - 0.5, gy, 1, L * ch);
			if (ch >= 6)
				for (let r = 1; r < L; r++)
					g.rect(gx, gy + r * ch - 0.5, E * cw, 1);
			g.fillStyle = bg;
			g.fill();
		}

		/* hit-rate strip: bar length and hue from the rate; a dim box for
		 * a row without requests in the window */
		const sx = LABEL_W;
		for (let r = 0; r < L; r++) {
			const v = data.rate[r];
			const y = gy + r * ch;
			g.fillStyle = '#1d232c';
			g.fillRect(sx, y, STRIP_W, Math.max(1, ch - (ch >= 6 ? 1 : 0)));
			if (typeof v === 'number') {
				const f = Math.max(0, Math.min(1, v));
				g.fillStyle = 'hsl(' + Math.round(f * 120) + ',70%,48%)';
				g.fillRect(sx, y, Math.max(1, f * STRIP_W), Math.max(1, ch - (ch >= 6 ? 1 : 0)));
			}
		}

		const fg = css('--muted', '#8b949e');
		g.fillStyle = fg;
		g.font = '9px ui-monospace, monospace';
		g.textBaseline = 'middle';
		g.textAlign = 'right';
		const every = Math.max(1, Math.ceil(11 / ch));
		for (let r = 0; r < L; r += every)
			g.fillText(String(data.ids[r] !== undefined ? data.ids[r] : r), LABEL_W - 4, gy + r * ch + ch / 2);
		g.textAlign = 'center';
		g.textBaseline = 'top';
		g.fillText('hit', sx + STRIP_W / 2, 2);
		const tick = [1, 2, 4, 8, 16, 32, 64, 128].find((k) => k * cw >= 26) || 256;
		for (let e = 0; e < E; e += tick)
			g.fillText(String(e), gx + e * cw + cw / 2, 2);

		if (hover) {
			g.strokeStyle = '#ffffff';
			g.lineWidth = 1.5;
			g.strokeRect(gx + hover.e * cw - 0.75, gy + hover.row * ch - 0.75, cw + 1.5, ch + 1.5);
			g.strokeStyle = 'rgba(255,255,255,0.35)';
			g.lineWidth = 1;
			g.strokeRect(sx - 0.5, gy + hover.row * ch - 0.5, STRIP_W + 1, ch + 1);
		}
	}

	function rect(row, e) {
		if (!lay || !data || row < 0 || e < 0 || row >= data.layers || e >= data.experts)
			return null;
		const b = canvas.getBoundingClientRect();
		return { x: b.left + lay.gx + e * lay.cw, y: b.top + lay.gy + row * lay.ch, w: lay.cw, h: lay.ch };
	}

	function hit(clientX, clientY) {
		if (!lay || !data)
			return null;
		const b = canvas.getBoundingClientRect();
		const x = clientX - b.left - lay.gx, y = clientY - b.top - lay.gy;
		if (x < 0 || y < 0)
			return null;
		const e = Math.floor(x / lay.cw), row = Math.floor(y / lay.ch);
		if (e >= data.experts || row >= data.layers)
			return null;
		if (data.where[row * data.experts + e] === 255)
			return null;
		return { row, e };
	}

	function tipText(c) {
		const w = c.where < 4 ? WHERE[c.where].name : '?';
		const hr = c.routed ? ' (' + ((c.ram_hits / c.routed) * 100).toFixed(0) + '%)' : '';
		let last = 'never';
		if (c.last) {
			const ago = data.step - c.last;
			last = 'step ' + c.last + (ago > 0 ? ' (' + ago + (ago === 1 ? ' step' : ' steps') + ' ago)' : ' (this step)');
		}
		const rate = data.rate[hover.row];
		return [
			'layer ' + c.layer + ', expert ' + c.expert,
			w + ', heat ' + c.heat + '/255',
			'routed ' + c.routed + ', RAM hits ' + c.ram_hits + hr,
			'last use ' + last,
			'layer hit rate ' + (typeof rate === 'number' ? (rate * 100).toFixed(0) + '%' : 'n/a'),
		].join('\n');
	}

	function updateTip() {
		const c = hover && cell(hover.row, hover.e);
		if (!c) {
			tip.hidden = true;
			return;
		}
		tip.textContent = tipText(c);
		tip.hidden = false;
		const tw = tip.offsetWidth, th = tip.offsetHeight;
		let x = mouse.x + 14, y = mouse.y + 14;
		if (x + tw > window.innerWidth - 4)
			x = mouse.x - tw - 10;
		if (y + th > window.innerHeight - 4)
			y = mouse.y - th - 10;
		tip.style.left = Math.max(4, x) + 'px';
		tip.style.top = Math.max(4, y) + 'px';
	}

	function onMove(ev) {
		mouse = { x: ev.clientX, y: ev.clientY };
		const h = hit(ev.clientX, ev.clientY);
		const changed = !h !== !hover || (h && (h.row !== hover.row || h.e !== hover.e));
		hover = h;
		updateTip();
		if (changed)
			schedule();
	}

	function onLeave() {
		if (hover) {
			hover = null;
			schedule();
		}
		tip.hidden = true;
	}

	function onState(s) {
		const m = s && s.map;
		if (!m || !(m.layers > 0) || !(m.experts > 0))
			return;
		data = decode(m);
		if (hover && (hover.row >= data.layers || hover.e >= data.experts))
			hover = null;
		document.getElementById('map-size').textContent =
			data.layers + ' layers x ' + data.experts + ' experts, step ' + data.step;
		if (hover)
			updateTip();
		schedule();
	}

	function legend() {
		const ul = document.getElementById('map-legend');
		for (const w of WHERE.slice().reverse()) {
			const li = document.createElement('li');
			const sw = document.createElement('i');
			sw.className = 'sw';
			sw.style.background = 'rgb(' + w.rgb.join(',') + ')';
			li.appendChild(sw);
			li.appendChild(document.createTextNode(w.name));
			ul.appendChild(li);
		}
	}

	C.map.cell = cell;
	C.map.rect = rect;
	C.ready(() => {
		canvas = document.getElementById('map-canvas');
		g = canvas.getContext('2d');
		tip = document.getElementById('map-tip');
		scroll = document.getElementById('map-scroll');
		legend();
		canvas.addEventListener('mousemove', onMove);
		canvas.addEventListener('mouseleave', onLeave);
		scroll.addEventListener('scroll', onLeave);
		window.addEventListener('resize', schedule);
		C.onState(onState);
	});
})();
