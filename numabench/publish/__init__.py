"""``numabench publish``: a self-contained static site of saved runs (no network at view time).

source.py reads runs (a folder of run files, git history, a fleet index) as a list of run dicts;
model.py turns that list into the site's data (plain JSON): runs.py names each run once,
verdicts.py says what changed in a run (pluggable verdict sources), numa.py is the NUMA view;
pages.py and the page_*.py modules write the HTML around it; build.py writes the folder;
site.js (hand-written, no library) draws the charts in the browser from the embedded JSON,
with hover values and zoom. Nothing is imported here, so that the command line's start stays
light.
"""
