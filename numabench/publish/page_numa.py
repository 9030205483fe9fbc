"""A key's NUMA page: where there is a placement choice, the policies side by side, the
weighted-interleave model beside the measurements and the advisor's table; a key of one NUMA
node says first that it has no choice, with how far apart its policies' times lie."""
from __future__ import annotations

from numabench.publish.pages import esc, fmt_time, key_nav, page, table


def _one_node(numa: dict, pages: dict[str, str]) -> list[str]:
    node = numa["nodes"][0].get("id", 0) if numa["nodes"] else 0
    parts = [f"<p class=\"lead\">This key's machines have one NUMA node: there is <b>no placement choice</b>. Every "
             f"policy puts the pages on node {esc(node)}: where two policies' times differ here, that is noise or what "
             "applying the policy costs, not placement, and there is nothing for the weighted-interleave model or the "
             "advisor to choose between.</p>"]
    agree = numa["policy_agreement"]
    if agree:
        rows = [[f"<a href=\"{esc(pages[a['family']])}\">{esc(a['family'])}</a>" if a["family"] in pages
                 else esc(a["family"]), esc(a["cases"]), esc(", ".join(a["policies"])), f"{a['median_pct']:.1f}%",
                 f"{a['max_pct']:.1f}%", esc(a["max_case"])] for a in agree]
        parts += ["<h2>How far apart the policies' times lie</h2>",
                  "<p class=\"note\">Per case run under several policies: the slowest policy's time over the fastest's "
                  "(each entry's newest value).</p>",
                  table(["family", "cases", "policies", "median apart", "most apart", "that case"], rows,
                        num={1, 3, 4})]
    return parts


def numa_html(key: dict) -> str:
    numa = key["numa"]
    charts: list[dict] = []
    nodes = ", ".join(f"node {n.get('id')}: {n.get('cpus')} CPUs{' (no CPUs)' if n.get('cpuless') else ''}"
                      for n in numa["nodes"]) or "not recorded"
    parts = []

    def panels(specs: list[dict]) -> str:
        out = []
        for s in specs:
            out.append(f"<div class=\"panel\"><h4>{esc(s['title'])}</h4><div data-chart=\"{len(charts)}\"></div></div>")
            charts.append(s)
        return "<div class=\"grid2\">" + "".join(out) + "</div>"

    if numa["one_node"]:
        parts += _one_node(numa, {f["family"]: f["file"] for f in key["families"]})
    parts.append(f"<p class=\"note\">NUMA nodes of the newest run: {esc(nodes)}. Each entry's newest value over the "
                 "key's runs.</p>")
    if not numa["one_node"]:
        parts.append("<h2>Policies side by side</h2>")
        if numa["policy_charts"]:
            parts.append(panels(numa["policy_charts"]))
        else:
            parts.append("<p class=\"muted\">No case of this key was measured under two policies or more.</p>")
    if numa["advice_charts"]:
        parts += ["<h2>Weighted interleave: the model beside the measurements</h2>",
                  "<p class=\"note\">t(f) = max(f&middot;t_fast, (1&minus;f)&middot;t_slow, floor); f is the share "
                  "of pages on the faster node, floor = t_fast where the phase crosses the host link "
                  "(numabench advise).</p>", panels(numa["advice_charts"]), "<h2>Advisor</h2>",
                  "<p class=\"note\">The fastest choice is the fast node alone unless the model puts a ratio faster "
                  "than it by more than 0.5%; each figure says what it stands on (measured, interpolated between "
                  "measured ratios, or extrapolated beyond them).</p>"]
        rows = [[esc(a["case"]), f"bind:{a['fast']} {fmt_time(a['t_fast_s'])}",
                 f"bind:{a['slow']} {fmt_time(a['t_slow_s'])}", "yes" if a["link_bound"] else "no", esc(a["best"]),
                 fmt_time(a["best_s"]), esc(a["best_basis"]), f"{a['max_slow_share']:.0%}", esc(a["room_basis"]),
                 esc(a["measured"]), "-" if a["max_error_pct"] is None else f"{a['max_error_pct']:.1f}%"]
                for a in numa["advice"]]
        parts.append(table(["case", "fast node", "slow node", "link-bound", "fastest", "its time",
                            "fastest stands on", "max share on slow node (2% budget)", "that share stands on",
                            "weighted measured", "largest model error"], rows, num={5, 7, 9, 10}))
    elif not numa["one_node"]:
        parts += ["<h2>Weighted interleave</h2>",
                  "<p class=\"muted\">No case of this key was measured bound to two single nodes (bind:A and "
                  "bind:B): nothing to model.</p>"]
    nav = f"<span class=\"sep\">{esc(key['key'])}:</span>{key_nav(key, key['numa_file'])}"
    return page(f"{key['key']}: NUMA placement", "\n".join(parts), {"charts": charts}, nav)
