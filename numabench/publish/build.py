"""Write the site: the pages, site.js and site.css, into one folder that opens from disk (whole, or not at
all: numabench.atomic)."""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from numabench.atomic import staged_folder
from numabench.errors import UsageError
from numabench.gate.rule import DEFAULT_THRESHOLD
from numabench.publish.model import Run, site_model
from numabench.publish.page_ab import ab_html, ab_pages
from numabench.ab.run import ABResult
from numabench.publish.page_family import family_html
from numabench.publish.page_index import index_page
from numabench.publish.page_numa import numa_html
from numabench.publish.page_offload import offload_html

ASSETS = ("site.js", "site.css")
MANIFEST = ".numabench-site"  # the files a publish wrote, one a line: what a later --force may replace


def published(folder: Path) -> set[str]:
    """The files a publish wrote into ``folder``: its manifest's, or (a site published before
    manifests) its pages and assets; everything else there is somebody else's."""
    try:
        return {ln for ln in (folder / MANIFEST).read_text().splitlines() if ln} | {MANIFEST}
    except OSError:
        return {p.name for p in folder.iterdir() if p.is_file() and (p.suffix == ".html" or p.name in ASSETS)}


@dataclass
class Site:
    out: Path
    pages: list[Path]
    keys: int
    runs: int
    ab_runs: int = 0


def _is_site(folder: Path) -> bool:
    return (folder / "index.html").is_file() and (folder / "site.js").is_file()


def check_out(out: Path, force: bool) -> bool:
    """May the site be written to ``out``: new, or an empty folder; with force also one that holds
    a site published before (then replaced: True). Any other non-empty folder is refused even
    with force: a typo such as --out . must not delete a folder of other files."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"publish --out {out}: exists and is not a folder")
    if out.is_dir() and any(out.iterdir()):
        if not force:
            raise UsageError(f"publish --out {out}: not empty; name an empty folder, or --force to replace a site "
                             "published there before")
        if not _is_site(out):
            raise UsageError(f"publish --out {out} --force: the folder holds files but no site published before "
                             "(no index.html and site.js): name an empty folder")
        return True
    return False


def build_site(runs: list[Run], out: str | Path, *, source: str = "", threshold: str | float = DEFAULT_THRESHOLD,
               force: bool = False, ab: list[tuple[str, ABResult]] = ()) -> Site:
    """The site of ``runs`` and of the A/B runs ``ab`` (label, result) in the folder ``out``:
    built beside it and renamed into place, so a failed write (no space, a file-size limit)
    leaves ``out`` as it was."""
    if not runs and not ab:
        raise UsageError("publish: no runs to publish")
    model = site_model(runs, threshold)
    ab_site = ab_pages(list(ab))
    out = Path(out)
    replace = check_out(out, force)
    # --force replaces only what a publish wrote: the folder's other files are carried into the new site
    theirs = sorted(p for p in out.iterdir() if p.name not in published(out)) if replace else []
    names = []
    # an empty --out keeps its own folder (its mode, its owner): the pages are moved into it
    with staged_folder(out, into_existing=not replace, replace=replace) as stage:
        def write(name: str, text: str) -> None:
            (stage / name).write_text(text, encoding="utf-8")
            names.append(name)

        write("index.html", index_page(model, source, ab_site))
        for p in ab_site:
            write(p.file, ab_html(p))
        pages_of = {(k["key"], f["family"]): f["file"] for k in model["keys"] for f in k["families"]}
        for key in model["keys"]:
            for fp in key["family_pages"]:
                elsewhere = [(k["key"], pages_of[(k["key"], fp["family"])]) for k in model["keys"]
                             if k is not key and (k["key"], fp["family"]) in pages_of]
                write(fp["file"], family_html(key, fp, elsewhere))
            write(key["numa_file"], numa_html(key))
            if key.get("offload_file"):
                write(key["offload_file"], offload_html(key))
        for name in ASSETS:
            (stage / name).write_bytes(resources.files("numabench.publish").joinpath(name).read_bytes())
        (stage / MANIFEST).write_text("".join(f"{n}\n" for n in (*names, *ASSETS)))
        for path in theirs:
            if path.is_dir() and not path.is_symlink():
                shutil.copytree(path, stage / path.name, symlinks=True)
            else:
                shutil.copy2(path, stage / path.name, follow_symlinks=False)
    return Site(out, [out / n for n in names], len(model["keys"]), len(runs), len(ab_site))
