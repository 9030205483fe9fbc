/* numabench publish: draws the site's charts from the JSON each page embeds (no library, no
   network). A chart spec: {title, kind (history, xy, dots), xlabel, ylabel, yunit ("s": times,
   shown in us, ms or s as the chart's values need), xlog, ylog, bandlabel (what a point's lo-hi
   is called in its tooltip; "band" where not given), xticks: [[x, label]], xspan:
   [x0, x1] (the axis spans it even where no point lies), vlines: [[x, tip, sign, label]] (change
   points: sign +1 slower, drawn red, -1 faster, drawn green), series: [{name, points: [[x, y,
   lo, hi, tip]], line, band ("bars": a bar per point from lo to hi, never an area between
   points), marker}]}. Hover shows a point's values; on a full chart the wheel zooms the x axis,
   a drag pans it and a double click resets. A row click (or a link to a row) shows its history
   in the detail panel and keeps the panel in view. When done, <body> carries data-rendered,
   data-charts, data-points and data-label-issues (tick labels overlapping, cut off or repeated
   on one axis), which the browser test reads. */
"use strict";
(function () {
  var NS = "http://www.w3.org/2000/svg";
  var COLORS = ["#1f77b4", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22",
    "#393b79", "#637939"];  // no red or green: those say slower and faster
  var SLOWER = "#d62728", FASTER = "#2ca02c", NEUTRAL = "#888888";
  var UNITS = [[1e-3, 1e6, "\u00b5s"], [1, 1e3, "ms"], [Infinity, 1, "s"]];  // below, scale, unit
  // An axis spans at least this share of its values (linear) or this ratio (log): a 0.5% wobble
  // must not fill the chart's height and look like a change.
  var MIN_REL_SPAN = 0.1;
  var stats = { charts: 0, points: 0, labelIssues: 0, issues: [], full: [] };
  var errors = [];
  window.addEventListener("error", function (e) {
    errors.push(String(e.message));
    document.body.setAttribute("data-errors", errors.join(" | "));
  });

  function el(tag, attrs, parent) {
    var n = document.createElementNS(NS, tag);
    for (var k in attrs) n.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(n);
    return n;
  }
  function fmt(v) {
    if (v === null || v === undefined || !isFinite(v)) return "-";
    var a = Math.abs(v);
    if (a !== 0 && (a >= 1e5 || a < 1e-3)) return v.toExponential(2);
    return String(Number(v.toPrecision(4)));
  }
  function fmtSize(v) {
    var u = [[1e9, "G"], [1e6, "M"], [1e3, "k"]];
    for (var i = 0; i < u.length; i++) if (Math.abs(v) >= u[i][0]) return fmt(v / u[i][0]) + u[i][1];
    return fmt(v);
  }
  function tr(v, log) { return log ? Math.log10(v) : v; }
  function niceTicks(lo, hi, n) {
    var span = hi - lo;
    if (!(span > 0)) return [lo];
    var step = Math.pow(10, Math.floor(Math.log10(span / n)));
    var err = (n * step) / span;
    if (err <= 0.15) step *= 10; else if (err <= 0.35) step *= 5; else if (err <= 0.75) step *= 2;
    var out = [];
    for (var t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push(Number(t.toPrecision(12)));
    return out;
  }
  function logTicks(lo, hi, n) { // lo, hi in log10 units
    var out = [];
    for (var e = Math.floor(lo); e <= Math.ceil(hi); e++) {
      [1, 2, 5].forEach(function (m) {
        var t = e + Math.log10(m);
        if (t >= lo - 1e-9 && t <= hi + 1e-9) out.push(t);
      });
    }
    if (out.length > n) out = out.filter(function (t) { return Math.abs(t - Math.round(t)) < 1e-9; });
    if (out.length < 2) return niceTicks(lo, hi, n);
    return out;
  }

  function unitOf(spec) {
    // times in the unit their largest value reaches 1 in; other values as the spec scales them
    if (spec.yunit !== "s") return { scale: spec.yscale || 1, label: spec.ylabel || "" };
    var top = 0;
    spec.series.forEach(function (s) {
      s.points.forEach(function (p) { if (p[1] !== null && isFinite(p[1])) top = Math.max(top, Math.abs(p[1])); });
    });
    var u = UNITS.filter(function (u) { return top < u[0]; })[0];
    return { scale: u[1], label: (spec.ylabel || "") + " (" + u[2] + ")" };
  }

  function extent(spec) {
    var xs = [], ys = [];
    spec.series.forEach(function (s) {
      s.points.forEach(function (p) {
        if (p[1] === null || p[0] === null) return;
        xs.push(tr(p[0], spec.xlog));
        [p[1], p[2], p[3]].forEach(function (v) {
          if (v !== null && v !== undefined && (!spec.ylog || v > 0)) ys.push(tr(v, spec.ylog));
        });
      });
    });
    (spec.vlines || []).forEach(function (v) { xs.push(tr(v[0], spec.xlog)); });
    (spec.xspan || []).forEach(function (x) { xs.push(tr(x, spec.xlog)); });
    if (!xs.length || !ys.length) return null;
    var x0 = Math.min.apply(null, xs), x1 = Math.max.apply(null, xs);
    var y0 = Math.min.apply(null, ys), y1 = Math.max.apply(null, ys);
    var least = spec.ylog ? Math.log10(1 + MIN_REL_SPAN) : MIN_REL_SPAN * Math.max(Math.abs(y0), Math.abs(y1));
    if (y1 - y0 < least) {
      var c = (y0 + y1) / 2;
      y0 = c - least / 2; y1 = c + least / 2;
    }
    var px = spec.kind === "dots" ? 0.5 : ((x1 - x0) * 0.04 || 0.5), py = (y1 - y0) * 0.08 || 0.5;
    return { x0: x0 - px, x1: x1 + px, y0: y0 - py, y1: y1 + py };
  }

  function overlaps(a, b) {
    return a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5;
  }
  function checkLabels(svg, title) {
    // What a reader would see: tick labels that run into each other or past the chart's edge.
    var box = svg.getBoundingClientRect();
    ["xt", "yt", "axis"].forEach(function (cls) {
      var rs = Array.prototype.map.call(svg.querySelectorAll("text." + cls), function (t) {
        return t.getBoundingClientRect();
      });
      var texts = Array.prototype.map.call(svg.querySelectorAll("text." + cls), function (t) { return t.textContent; });
      if (cls !== "axis" && new Set(texts).size < texts.length) {
        stats.labelIssues++; stats.issues.push(title + ": two " + cls + " labels read the same");
      }
      rs.forEach(function (r, i) {
        if (r.left < box.left - 0.5 || r.right > box.right + 0.5 || r.top < box.top - 0.5 || r.bottom > box.bottom + 0.5) {
          stats.labelIssues++; stats.issues.push(title + ": label cut off");
        }
        for (var j = i + 1; j < rs.length; j++) if (overlaps(r, rs[j])) {
          stats.labelIssues++; stats.issues.push(title + ": labels overlap");
        }
      });
    });
  }

  var tip = null;
  function tooltip() {
    if (!tip) { tip = document.createElement("div"); tip.className = "tip"; document.body.appendChild(tip); }
    return tip;
  }

  function Chart(host, spec, compact) {
    this.host = host; this.spec = spec; this.compact = compact;
    this.unit = unitOf(spec);
    this.full = extent(spec);
    this.view = this.full && { x0: this.full.x0, x1: this.full.x1 };
    this.draw();
    if (!compact && this.full) this.interact();
    if (!compact) stats.full.push(this);
    if (!compact) this.legend();
  }
  Chart.prototype.draw = function () {
    var spec = this.spec, host = this.host, compact = this.compact;
    var old = host.querySelector("svg");
    if (old) host.removeChild(old);
    var W = Math.max(host.clientWidth || 0, compact ? 120 : 320), H = compact ? 34 : 280;
    var m = compact ? { l: 3, r: 3, t: 3, b: 3 } : { l: 62, r: 14, t: 12, b: 42 };
    var svg = el("svg", { width: W, height: H, viewBox: "0 0 " + W + " " + H, "class": "chart" });
    host.insertBefore(svg, host.firstChild);
    this.svg = svg;
    if (!this.full) { el("text", { x: 8, y: H / 2, "class": "empty" }, svg).textContent = "no data"; return; }
    var v = this.view, f = this.full, ys = this.unit.scale;
    var pw = W - m.l - m.r, ph = H - m.t - m.b;
    var X = function (x) { return m.l + (tr(x, spec.xlog) - v.x0) / (v.x1 - v.x0) * pw; };
    var Y = function (y) { return m.t + ph - (tr(y, spec.ylog) - f.y0) / (f.y1 - f.y0) * ph; };
    this.X = X; this.Y = Y; this.m = m; this.pw = pw; this.ph = ph;
    var id = "c" + Math.random().toString(36).slice(2);
    el("rect", { x: m.l, y: m.t, width: pw, height: ph }, el("clipPath", { id: id }, el("defs", {}, svg)));
    if (!compact) {
      var yt = spec.ylog ? logTicks(f.y0, f.y1, Math.max(2, ph / 40)) : niceTicks(f.y0, f.y1, Math.max(2, ph / 40));
      yt.forEach(function (t) {
        var y = m.t + ph - (t - f.y0) / (f.y1 - f.y0) * ph;
        if (y < m.t - 1 || y > m.t + ph + 1) return;
        el("line", { x1: m.l, x2: m.l + pw, y1: y, y2: y, "class": "grid" }, svg);
        el("text", { x: m.l - 5, y: y + 4, "class": "yt", "text-anchor": "end" }, svg).textContent =
          fmt((spec.ylog ? Math.pow(10, t) : t) * ys);
      });
      var xt;
      if (spec.xticks) {
        xt = spec.xticks.filter(function (t) { var x = tr(t[0], spec.xlog); return x >= v.x0 && x <= v.x1; });
        // one label per slot wide enough for the longest one: none run into each other
        var longest = Math.max.apply(null, xt.map(function (t) { return String(t[1]).length; }).concat([1]));
        var every = Math.max(1, Math.ceil(xt.length * (longest * 6.6 + 10) / pw));
        xt = xt.filter(function (t, i) { return i % every === 0; });
      } else {
        var raw = spec.xlog ? logTicks(v.x0, v.x1, Math.max(2, pw / 90)) : niceTicks(v.x0, v.x1, Math.max(2, pw / 90));
        xt = raw.map(function (t) { var x = spec.xlog ? Math.pow(10, t) : t; return [x, spec.xlog ? fmtSize(x) : fmt(x)]; });
      }
      xt.forEach(function (t) {
        var x = X(t[0]);
        if (x < m.l - 1 || x > m.l + pw + 1) return;
        el("line", { x1: x, x2: x, y1: m.t, y2: m.t + ph, "class": "grid" }, svg);
        var anchor = x - m.l < 30 ? "start" : (m.l + pw - x < 30 ? "end" : "middle");
        el("text", { x: x, y: m.t + ph + 15, "class": "xt", "text-anchor": anchor }, svg).textContent = t[1];
      });
      el("rect", { x: m.l, y: m.t, width: pw, height: ph, "class": "frame" }, svg);
      el("text", { x: m.l + pw / 2, y: H - 6, "class": "axis", "text-anchor": "middle" }, svg).textContent = spec.xlabel || "";
      el("text", { x: 12, y: m.t + ph / 2, "class": "axis", "text-anchor": "middle",
        transform: "rotate(-90 12 " + (m.t + ph / 2) + ")" }, svg).textContent = this.unit.label;
    }
    var plot = el("g", { "clip-path": "url(#" + id + ")" }, svg);
    (spec.vlines || []).forEach(function (vl) {
      var x = X(vl[0]), sign = vl[2] || 0, col = sign > 0 ? SLOWER : (sign < 0 ? FASTER : NEUTRAL);
      el("line", { x1: x, x2: x, y1: m.t, y2: m.t + ph, stroke: col, "data-sign": sign,
        "class": "change " + (sign > 0 ? "slower" : (sign < 0 ? "faster" : "")) }, plot);
      if (compact) return;
      if (vl[3]) el("text", { x: x + (m.l + pw - x < 60 ? -4 : 4), y: m.t + 11, fill: col, "class": "cpl",
        "text-anchor": m.l + pw - x < 60 ? "end" : "start" }, plot).textContent = vl[3];
      el("title", {}, el("rect", { x: x - 3, y: m.t, width: 6, height: ph, "class": "hit" }, plot)).textContent = vl[1];
    });
    var pts = [];
    spec.series.forEach(function (s, si) {
      var c = s.color || COLORS[si % COLORS.length];
      var P = s.points.filter(function (p) { return p[1] !== null && (!spec.ylog || p[1] > 0); });
      var has = function (p) { return p[2] !== undefined && p[2] !== null && p[3] !== null && p[3] !== undefined; };
      if (s.line !== false && P.length > 1)
        el("polyline", { points: P.map(function (p) { return X(p[0]) + "," + Y(p[1]); }).join(" "), stroke: c,
          "class": "line" + (s.band ? " thin" : "") }, plot);
      P.forEach(function (p) {
        if (!has(p)) return;
        if (s.band) {  // the run's own band: a bar at its point, nothing drawn between runs
          var w = compact ? 4 : 10, top = Y(p[3]), h = Math.max(1, Y(p[2]) - top);
          el("rect", { x: X(p[0]) - w / 2, y: top, width: w, height: h, fill: c, stroke: c, "class": "bandbar",
            "data-x": p[0] }, plot);
        } else if (p[3] > p[2]) {
          el("line", { x1: X(p[0]), x2: X(p[0]), y1: Y(p[2]), y2: Y(p[3]), stroke: c, "class": "err" }, plot);
        }
      });
      if (s.marker !== "none") P.forEach(function (p) {
        el("circle", { cx: X(p[0]), cy: Y(p[1]), r: compact ? 1.8 : 3.2, fill: s.marker === "hollow" ? "#fff" : c,
          stroke: c, "class": "pt", "data-x": p[0] }, plot);
      });
      P.forEach(function (p) { pts.push({ s: s, c: c, p: p }); });
    });
    this.pts = pts;
    stats.points += pts.length;
    if (!compact) checkLabels(svg, spec.title || "chart");
    this.hover();
  };
  Chart.prototype.hover = function () {
    var self = this, spec = this.spec, ys = this.unit.scale;
    this.svg.addEventListener("mousemove", function (ev) {
      var r = self.svg.getBoundingClientRect(), mx = ev.clientX - r.left, my = ev.clientY - r.top, best = null, bd = 400;
      self.pts.forEach(function (q) {
        var dx = self.X(q.p[0]) - mx, dy = self.Y(q.p[1]) - my, d = dx * dx + dy * dy;
        if (d < bd) { bd = d; best = q; }
      });
      var t = tooltip();
      if (!best) { t.style.display = "none"; return; }
      var p = best.p, xl = spec.xticks ? (spec.xticks.filter(function (k) { return k[0] === p[0]; })[0] || [0, fmt(p[0])])[1]
        : (spec.xlog ? fmtSize(p[0]) : fmt(p[0]));
      var lines = ["<b>" + best.s.name + "</b>", (spec.xlabel || "x") + ": " + xl, self.unit.label + ": " + fmt(p[1] * ys)];
      if (p[2] !== undefined && p[2] !== null && p[3] !== null && p[3] !== undefined)
        lines.push((spec.bandlabel || "band") + ": " + fmt(p[2] * ys) + " to " + fmt(p[3] * ys));
      if (p[4]) lines.push(p[4]);
      t.innerHTML = lines.join("<br>");
      t.style.display = "block";
      t.style.left = Math.min(ev.pageX + 14, window.scrollX + document.documentElement.clientWidth - 280) + "px";
      t.style.top = (ev.pageY + 12) + "px";
    });
    this.svg.addEventListener("mouseleave", function () { tooltip().style.display = "none"; });
  };
  Chart.prototype.interact = function () {
    var self = this, drag = null;
    this.host.addEventListener("wheel", function (ev) {
      ev.preventDefault();
      var r = self.svg.getBoundingClientRect(), v = self.view;
      var fx = Math.min(1, Math.max(0, (ev.clientX - r.left - self.m.l) / self.pw));
      var at = v.x0 + fx * (v.x1 - v.x0), k = ev.deltaY < 0 ? 0.8 : 1.25;
      var span = Math.min(self.full.x1 - self.full.x0, (v.x1 - v.x0) * k);
      self.view = { x0: at - fx * span, x1: at - fx * span + span };
      self.clamp(); self.draw();
    }, { passive: false });
    this.host.addEventListener("mousedown", function (ev) { drag = { x: ev.clientX, v: self.view }; ev.preventDefault(); });
    window.addEventListener("mouseup", function () { drag = null; });
    window.addEventListener("mousemove", function (ev) {
      if (!drag) return;
      var d = (ev.clientX - drag.x) / self.pw * (drag.v.x1 - drag.v.x0);
      self.view = { x0: drag.v.x0 - d, x1: drag.v.x1 - d };
      self.clamp(); self.draw();
    });
    this.host.addEventListener("dblclick", function () { self.view = { x0: self.full.x0, x1: self.full.x1 }; self.draw(); });
  };
  Chart.prototype.clamp = function () {
    var v = this.view, f = this.full, span = v.x1 - v.x0;
    if (v.x0 < f.x0) { v.x0 = f.x0; v.x1 = f.x0 + span; }
    if (v.x1 > f.x1) { v.x1 = f.x1; v.x0 = f.x1 - span; }
  };
  Chart.prototype.legend = function () {
    var spec = this.spec;
    if (spec.series.length < 2 && !(spec.vlines || []).length) return;
    var d = document.createElement("div");
    d.className = "legend";
    spec.series.forEach(function (s, si) {
      var c = s.color || COLORS[si % COLORS.length], i = document.createElement("span");
      i.innerHTML = '<i style="background:' + c + '"></i>';
      i.appendChild(document.createTextNode(s.name));
      d.appendChild(i);
    });
    [[1, SLOWER, "change point: slower"], [-1, FASTER, "change point: faster"]].forEach(function (k) {
      if (!(spec.vlines || []).some(function (v) { return v[2] === k[0]; })) return;
      var i = document.createElement("span");
      i.innerHTML = '<i class="chg" style="border-color:' + k[1] + '"></i>';
      i.appendChild(document.createTextNode(k[2]));
      d.appendChild(i);
    });
    this.host.appendChild(d);
  };

  function selftest(d, nav) {
    // #selftest: hover a point and zoom the first full chart as a person would, follow a "what
    // changed" link to its row and click the last row scrolled into view, so that a headless
    // browser test sees the interaction work (it cannot move a mouse through --dump-dom).
    var c = stats.full.filter(function (k) { return k.pts && k.pts.length; })[0];
    if (!c) return "no chart with points";
    var p = c.pts[0].p, r = c.svg.getBoundingClientRect();
    var at = { clientX: r.left + c.X(p[0]), clientY: r.top + c.Y(p[1]), bubbles: true };
    c.svg.dispatchEvent(new MouseEvent("mousemove", at));
    var t = tooltip(), out = [];
    // the event's coordinates are whole pixels: the nearest point may be another series' at the same place
    var shown = t.style.display === "block" && t.textContent.indexOf(c.spec.ylabel || "y") >= 0;
    out.push(shown ? "hover=ok" : "hover=FAILED(" + t.style.display + ")");
    var before = c.view.x1 - c.view.x0;
    c.host.dispatchEvent(new WheelEvent("wheel", { clientX: at.clientX, clientY: at.clientY, deltaY: -120,
      bubbles: true, cancelable: true }));
    out.push(c.view.x1 - c.view.x0 < before ? "zoom=ok" : "zoom=FAILED");
    c.host.dispatchEvent(new MouseEvent("dblclick", { bubbles: true }));
    out.push(Math.abs(c.view.x1 - c.view.x0 - before) < 1e-9 ? "reset=ok" : "reset=FAILED");
    var box = document.getElementById("filter");
    if (box) {
      var rows = document.querySelectorAll("tr[data-entry]"), first = rows[0].cells[0].textContent;
      box.value = first; box.dispatchEvent(new Event("input"));
      var left = Array.prototype.filter.call(rows, function (r) { return r.style.display !== "none"; }).length;
      out.push(left >= 1 && left <= rows.length ? "filter=ok" : "filter=FAILED");
      box.value = ""; box.dispatchEvent(new Event("input"));
    }
    if (nav) {
      var panel = document.getElementById("detail-panel"), title = document.getElementById("detail-title");
      var inView = function (row) {  // "ok", or where the panel and the row lie
        var pr = panel.getBoundingClientRect(), rr = row.getBoundingClientRect(), h = window.innerHeight;
        var same = title.textContent === d.charts[row.getAttribute("data-entry")].title;
        return pr.top >= -1 && pr.bottom <= h + 1 && rr.top >= pr.bottom - 1 && rr.bottom <= h + 1 && same ? "ok" :
          "FAILED(panel " + Math.round(pr.top) + ".." + Math.round(pr.bottom) + ", row " + Math.round(rr.top) + ".." +
          Math.round(rr.bottom) + " of " + h + (same ? "" : ", another chart") + ")";
      };
      var link = document.querySelector('#what-changed a[href*="#"]');
      if (link) {
        window.scrollTo(0, 0);
        var row = nav.go(link.getAttribute("href").split("#")[1]);
        out.push("link=" + (row ? inView(row) : "FAILED(no row " + link.getAttribute("href") + ")"));
      }
      var all = document.querySelectorAll("tr[data-entry]"), last = all[all.length - 1];
      last.scrollIntoView({ block: "end" });  // scrolled down to the last row, as a reader would
      last.dispatchEvent(new MouseEvent("click", { bubbles: true }));
      out.push("inview=" + inView(last));
      window.scrollTo(0, 0);
    }
    return out.join(" ");
  }

  function filterRows() {
    // every word typed must appear in the entry's group title or its row; a group with no row
    // left is hidden with its title
    var box = document.getElementById("filter");
    if (!box) return;
    var apply = function () {
      var words = box.value.toLowerCase().split(/\s+/).filter(Boolean), shown = 0, total = 0;
      document.querySelectorAll("section.group").forEach(function (sec) {
        var title = sec.getAttribute("data-title").toLowerCase(), any = false;
        sec.querySelectorAll("tr[data-entry]").forEach(function (row) {
          var text = title + " " + row.textContent.toLowerCase();
          var ok = words.every(function (w) { return text.indexOf(w) >= 0; });
          row.style.display = ok ? "" : "none";
          total++; if (ok) { shown++; any = true; }
        });
        sec.style.display = any ? "" : "none";
      });
      document.getElementById("filter-count").textContent = shown + " of " + total + " entries";
    };
    box.addEventListener("input", apply);
    apply();
  }

  function data() {
    var n = document.getElementById("site-data");
    return n ? JSON.parse(n.textContent) : { charts: [] };
  }
  function render() {
    var d = data(), charts = d.charts || [];
    document.querySelectorAll("[data-chart]").forEach(function (host) {
      var spec = charts[Number(host.getAttribute("data-chart"))];
      if (!spec) throw new Error("no chart spec " + host.getAttribute("data-chart"));
      new Chart(host, spec, host.classList.contains("spark"));
      stats.charts++;
    });
    var detail = document.getElementById("detail"), nav = null;
    if (detail) {
      var panel = document.getElementById("detail-panel");
      var show = function (k, scroll) {
        var spec = charts[k];
        // the panel keeps its height while it is redrawn: emptied for a moment, it would shorten the
        // page, and a window scrolled near the page's end would jump back up
        detail.style.minHeight = detail.offsetHeight + "px";
        detail.innerHTML = "";
        document.getElementById("detail-title").textContent = spec.title;
        new Chart(detail, spec, false);
        detail.style.minHeight = "";
        document.querySelectorAll("tr.sel").forEach(function (r) { r.classList.remove("sel"); });
        var row = document.querySelector('tr[data-entry="' + k + '"]');
        if (row) row.classList.add("sel");
        // the panel sticks to the top of the window; where it cannot (a short window), a click brings it back
        var pr = panel.getBoundingClientRect();
        if (scroll && (pr.top < 0 || pr.bottom > window.innerHeight)) panel.scrollIntoView({ block: "start" });
      };
      nav = {
        go: function (id) {  // a link to a row: its history in the panel, the row just below it
          var row = document.getElementById(id);
          if (!row || !row.hasAttribute("data-entry")) return null;
          var box = document.getElementById("filter");
          if (row.style.display === "none" && box) { box.value = ""; box.dispatchEvent(new Event("input")); }
          show(Number(row.getAttribute("data-entry")), false);
          row.scrollIntoView({ block: "start" });  // its scroll-margin keeps it below the panel
          return row;
        }
      };
      document.querySelectorAll("tr[data-entry]").forEach(function (row) {
        row.addEventListener("click", function () { show(Number(row.getAttribute("data-entry")), true); });
      });
      window.addEventListener("hashchange", function () { nav.go(decodeURIComponent(location.hash.slice(1))); });
      var hash = decodeURIComponent(location.hash.slice(1));
      if (!(hash && hash !== "selftest" && nav.go(hash))) show(d.first || 0, false);
      stats.charts++;
    }
    var changed = document.getElementById("what-changed");
    if (changed) {  // where the "what changed" block lies on the page (the browser test: on the first screen)
      var cb = changed.getBoundingClientRect();
      document.body.setAttribute("data-changed-box", Math.round(cb.top + window.scrollY) + "," +
        Math.round(cb.bottom + window.scrollY));
    }
    document.body.setAttribute("data-charts", stats.charts);
    document.body.setAttribute("data-points", stats.points);
    document.body.setAttribute("data-label-issues", stats.labelIssues);
    if (stats.issues.length) document.body.setAttribute("data-label-issue-list", stats.issues.slice(0, 5).join(" | "));
    filterRows();
    if (location.hash === "#selftest") document.body.setAttribute("data-selftest", selftest(d, nav));
    document.body.setAttribute("data-rendered", "ok");
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", render); else render();
})();
